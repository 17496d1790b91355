// Package linkio holds what both ends of a shard link share: the ALPN, the
// frame reader and writer, and a dev TLS certificate.
package linkio

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"io"
	"math/big"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/oshun/egbe-edge/codec"
)

// ALPN is the TLS application protocol of a shard link. It names the
// protocol version, so an edge and a shard of different versions fail the
// TLS handshake instead of misreading each other's frames.
const ALPN = "egbe-link/2"

// Version is LinkHello.version / LinkShardHello.version: 2 multiplexes
// sessions over lanes (codec/link.proto).
const Version = 2

// MaxFrameSize bounds one link frame. A 2,000-entity snapshot is ~60 KiB; the
// limit leaves room for larger instances while bounding what one bad frame can
// make a reader allocate.
const MaxFrameSize = 1 << 20

// QUIC application and stream error codes used on a link.
const (
	CodeNone      = 0x0
	CodeShutdown  = 0x1 // the peer is shutting down
	CodeHeartbeat = 0x2 // heartbeats stopped
	CodeProtocol  = 0x3 // a malformed frame
	CodeAuth      = 0x4 // the link token is missing or wrong
)

// ErrBadFrame: a link frame did not decode.
var ErrBadFrame = errors.New("linkio: malformed link frame")

// Reader reads length-prefixed frames from one stream. Owned by one
// goroutine. An edge has one per link stream (control and lanes), not one
// per session.
type Reader struct {
	r   *bufio.Reader
	buf []byte
}

// NewReader wraps r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReaderSize(r, 16<<10)} }

// Next returns the next frame's body, valid until the next read.
func (r *Reader) Next() ([]byte, error) { return r.next() }

func (r *Reader) next() ([]byte, error) {
	b, err := codec.ReadFrame(r.r, r.buf, MaxFrameSize)
	if err != nil {
		return nil, err
	}
	if cap(b) > cap(r.buf) {
		r.buf = b[:0]
	}
	return b, nil
}

// ReadEdge reads one edge -> shard frame into f.
func (r *Reader) ReadEdge(f *codec.LinkEdgeFrame) error {
	b, err := r.next()
	if err != nil {
		return err
	}
	return DecodeEdge(b, f)
}

// ReadShard reads one shard -> edge frame into f.
func (r *Reader) ReadShard(f *codec.LinkShardFrame) error {
	b, err := r.next()
	if err != nil {
		return err
	}
	return DecodeShard(b, f)
}

// ReadShardFrame reads one shard -> edge frame into f with the edge's
// protowire decoder (codec.DecodeShardFrame: no reflection, no allocation
// for snapshots, acks and pongs).
func (r *Reader) ReadShardFrame(f *codec.ShardFrame) error {
	b, err := r.next()
	if err != nil {
		return err
	}
	if err := codec.DecodeShardFrame(b, f); err != nil {
		return fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	return nil
}

// DecodeEdge decodes one edge -> shard frame body.
func DecodeEdge(b []byte, f *codec.LinkEdgeFrame) error {
	if len(b) > MaxFrameSize {
		return fmt.Errorf("%w: %d bytes", codec.ErrFrameTooLarge, len(b))
	}
	if err := proto.Unmarshal(b, f); err != nil {
		return fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	if f.Msg == nil {
		return fmt.Errorf("%w: empty frame", ErrBadFrame)
	}
	return nil
}

// DecodeShard decodes one shard -> edge frame body.
func DecodeShard(b []byte, f *codec.LinkShardFrame) error {
	if len(b) > MaxFrameSize {
		return fmt.Errorf("%w: %d bytes", codec.ErrFrameTooLarge, len(b))
	}
	if err := proto.Unmarshal(b, f); err != nil {
		return fmt.Errorf("%w: %w", ErrBadFrame, err)
	}
	if f.Msg == nil {
		return fmt.Errorf("%w: empty frame", ErrBadFrame)
	}
	return nil
}

// AppendFrame appends m, length-prefixed, to dst.
func AppendFrame(dst []byte, m proto.Message) ([]byte, error) {
	start := len(dst)
	out, err := codec.AppendLinkFrame(dst, m)
	if err != nil {
		return dst, fmt.Errorf("linkio: marshal: %w", err)
	}
	if n := len(out) - start; n > MaxFrameSize+4 {
		return dst[:start], fmt.Errorf("%w: %d bytes", codec.ErrFrameTooLarge, n)
	}
	return out, nil
}

// SessionFrame returns one length-prefixed frame: body (an encoded
// LinkShardFrame or LinkEdgeFrame without its session field) for session.
// A message encoded once can so be addressed to many sessions: protobuf
// fields may come in any order, so the session field is simply prepended.
func SessionFrame(session uint32, body []byte) []byte {
	n := 1 + protowire.SizeVarint(uint64(session)) + len(body)
	b := make([]byte, 0, protowire.SizeVarint(uint64(n))+n)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, 15, protowire.VarintType) // LinkShardFrame.session, LinkEdgeFrame.session
	b = protowire.AppendVarint(b, uint64(session))
	return append(b, body...)
}

// Frame returns m as one length-prefixed frame.
func Frame(m proto.Message) ([]byte, error) { return AppendFrame(nil, m) }

// SelfSigned returns a server TLS config with a fresh ECDSA P-256 certificate
// for ALPN, valid for validity.
func SelfSigned(validity time.Duration) (*tls.Config, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("linkio: key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, fmt.Errorf("linkio: serial: %w", err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "egbe-shard"},
		DNSNames:     []string{"localhost", "egbe-shard"},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(validity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("linkio: certificate: %w", err)
	}
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		NextProtos:   []string{ALPN},
		MinVersion:   tls.VersionTLS13,
	}, nil
}
