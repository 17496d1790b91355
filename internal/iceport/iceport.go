// Package iceport owns the edge's one ICE UDP port. Every WebRTC peer
// connection the edge answers — realtime data channels and voice alike —
// is ICE-lite and shares this socket through an ICE UDP mux, so operators
// open exactly one UDP port (--ice-udp) for all of WebRTC.
//
// Consumers build their own webrtc.API (each has its own media engine and
// interceptors) from the SettingEngine this package hands out.
//
// Writes on the port are batched (batch.go): packets leave in sendmmsg(2)
// batches, with UDP GSO for same-destination runs where the kernel has it.
// A producer of bursts (the voice SFU's fan-out) brackets each burst with
// Cork/Uncork so that the whole burst leaves in as few syscalls as the
// batch size allows; everyone else's writes go out at once.
package iceport

import (
	"fmt"
	"net"
	"strconv"

	"github.com/pion/ice/v4"
	"github.com/pion/logging"
	"github.com/pion/webrtc/v4"
)

// Config says where the ICE port listens and which address it advertises.
type Config struct {
	// Listen is the UDP address, e.g. ":8444" or "127.0.0.1:0".
	Listen string
	// PublicIPs, when set, replace the host candidates' addresses (1:1 NAT,
	// e.g. a cloud VM's public address).
	PublicIPs []string
}

// Port is the shared ICE UDP socket and its mux.
type Port struct {
	conn *net.UDPConn // immutable after Listen
	bc   *batchConn   // immutable after Listen: conn with batched writes
	mux  ice.UDPMux   // immutable after Listen
	cfg  Config       // immutable after Listen
}

// Listen opens the UDP socket and starts the mux.
func Listen(cfg Config) (*Port, error) {
	addr, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("iceport: resolve %q: %w", cfg.Listen, err)
	}
	conn, err := net.ListenUDP("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("iceport: listen %q: %w", cfg.Listen, err)
	}
	// Room for bursts of voice from many peers while the mux goroutine is
	// busy; the kernel default (~200 KiB) drops under load.
	_ = conn.SetReadBuffer(8 << 20)
	_ = conn.SetWriteBuffer(8 << 20)
	bc, err := newBatchConn(conn)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("iceport: %w", err)
	}
	logger := logging.NewDefaultLoggerFactory().NewLogger("iceport")
	return &Port{conn: conn, bc: bc, mux: webrtc.NewICEUDPMux(logger, bc), cfg: cfg}, nil
}

// Cork holds the port's writes in the current batch until the matching
// Uncork, so that a burst (one packet fanned out to many peers) leaves in
// one sendmmsg per 64 packets. Corks nest and may be held by several
// goroutines. A corked packet waits at most for its batch to fill, the
// last Uncork, or 2 ms, whichever comes first. The holder must not block
// between Cork and Uncork.
func (p *Port) Cork() { p.bc.cork() }

// Uncork releases one Cork; the last one sends what waits.
func (p *Port) Uncork() { p.bc.uncork() }

// Stats reports what the batching writer has done since Listen.
func (p *Port) Stats() Stats { return p.bc.stats() }

// Addr is the bound UDP address.
func (p *Port) Addr() *net.UDPAddr { return p.conn.LocalAddr().(*net.UDPAddr) }

// PortNumber is the bound UDP port.
func (p *Port) PortNumber() int { return p.Addr().Port }

// String is host:port of the bound address.
func (p *Port) String() string {
	return net.JoinHostPort(p.Addr().IP.String(), strconv.Itoa(p.PortNumber()))
}

// SettingEngine returns a SettingEngine for an ICE-lite answerer on this
// port: UDP4 host candidates only, no mDNS, loopback allowed (for a
// single-machine setup and tests).
func (p *Port) SettingEngine() webrtc.SettingEngine {
	var se webrtc.SettingEngine
	se.SetLite(true)
	se.SetICEUDPMux(p.mux)
	se.SetNetworkTypes([]webrtc.NetworkType{webrtc.NetworkTypeUDP4})
	se.SetICEMulticastDNSMode(ice.MulticastDNSModeDisabled)
	se.SetIncludeLoopbackCandidate(true)
	if len(p.cfg.PublicIPs) > 0 {
		se.SetNAT1To1IPs(p.cfg.PublicIPs, webrtc.ICECandidateTypeHost)
	}
	return se
}

// Close stops the mux, sends what is queued and closes the socket.
func (p *Port) Close() error {
	err := p.mux.Close()
	if cerr := p.bc.Close(); err == nil {
		err = cerr
	}
	return err
}
