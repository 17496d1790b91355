package bench

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// A Redis round-trip counter for the scenarios that count them.

// respCounter is a TCP proxy in front of Redis that counts round trips:
// every batch of commands a client sends at once (one command, a
// pipeline, or MULTI..EXEC) is one. A go-redis connection never sends
// again before it has read the reply, so batches are round trips.
type respCounter struct {
	ln       net.Listener
	upstream string
	wg       sync.WaitGroup

	mu    sync.Mutex
	trips map[string]int64 // guarded by mu: by shape
	cmds  map[string]int64 // guarded by mu: by command name
	log   []tripAt         // guarded by mu: bounded
	conns map[net.Conn]struct{}
}

type tripAt struct {
	at    time.Time
	shape string
}

const tripLogMax = 200_000

func startRespCounter(upstream string) (*respCounter, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &respCounter{ln: ln, upstream: upstream, trips: map[string]int64{}, cmds: map[string]int64{}, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go func() { defer p.wg.Done(); p.accept() }()
	return p, nil
}

func (p *respCounter) Addr() string { return p.ln.Addr().String() }

// Close stops the proxy and waits for its goroutines.
func (p *respCounter) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *respCounter) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *respCounter) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			p.mu.Lock()
			conns := p.conns
			p.conns = nil
			p.mu.Unlock()
			for c := range conns {
				_ = c.Close()
			}
			return
		}
		up, err := net.Dial("tcp", p.upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c) || !p.track(up) {
			_ = c.Close()
			_ = up.Close()
			continue
		}
		p.wg.Add(2)
		go func() { // replies
			defer p.wg.Done()
			_, _ = io.Copy(c, up)
			_ = c.Close()
		}()
		go func() { // requests
			defer p.wg.Done()
			defer up.Close()
			defer c.Close()
			br := bufio.NewReaderSize(c, 64<<10)
			for {
				raw, names, shape, err := readBatch(br)
				if err != nil {
					return
				}
				p.record(names, shape)
				if _, err := up.Write(raw); err != nil {
					return
				}
			}
		}()
	}
}

func (p *respCounter) record(names []string, shape string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trips[shape]++
	for _, n := range names {
		p.cmds[n]++
	}
	if len(p.log) < tripLogMax {
		p.log = append(p.log, tripAt{time.Now(), shape})
	}
}

// snapshot copies the counts: trips by shape, commands by name.
func (p *respCounter) snapshot() (map[string]int64, map[string]int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := make(map[string]int64, len(p.trips))
	for k, v := range p.trips {
		t[k] = v
	}
	c := make(map[string]int64, len(p.cmds))
	for k, v := range p.cmds {
		c[k] = v
	}
	return t, c
}

// between lists the round trips made within [from, to], in order.
func (p *respCounter) between(from, to time.Time) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, t := range p.log {
		if !t.at.Before(from) && !t.at.After(to) {
			out = append(out, t.shape)
		}
	}
	return out
}

// readBatch reads every command the client has sent at once.
func readBatch(br *bufio.Reader) (raw []byte, names []string, shape string, err error) {
	var parts []string
	for {
		var args []string
		raw, args, err = readCommand(br, raw)
		if err != nil {
			return nil, nil, "", err
		}
		if len(args) == 0 {
			continue
		}
		name := strings.ToLower(args[0])
		names = append(names, name)
		parts = append(parts, name+keyShape(name, args))
		if br.Buffered() == 0 {
			break
		}
	}
	shape = strings.Join(parts, " + ")
	if len(parts) > 1 {
		shape = "pipeline[" + shape + "]"
	}
	return raw, names, shape, nil
}

// readCommand reads one RESP command (an array of bulk strings, or an
// inline command), appends its bytes to raw, and returns its first few
// arguments.
func readCommand(br *bufio.Reader, raw []byte) ([]byte, []string, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return raw, nil, err
	}
	raw = append(raw, line...)
	if !strings.HasPrefix(line, "*") {
		return raw, strings.Fields(line), nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil || n < 0 || n > 1<<20 {
		return raw, nil, fmt.Errorf("bench: bad RESP array header %q", line)
	}
	var args []string
	for range n {
		hdr, err := br.ReadString('\n')
		if err != nil {
			return raw, nil, err
		}
		raw = append(raw, hdr...)
		if !strings.HasPrefix(hdr, "$") {
			return raw, nil, fmt.Errorf("bench: bad RESP bulk header %q", hdr)
		}
		size, err := strconv.Atoi(strings.TrimSpace(hdr[1:]))
		if err != nil || size < 0 || size > 512<<20 {
			return raw, nil, fmt.Errorf("bench: bad RESP bulk size %q", hdr)
		}
		start := len(raw)
		raw = append(raw, make([]byte, size+2)...)
		if _, err := io.ReadFull(br, raw[start:]); err != nil {
			return raw, nil, err
		}
		if len(args) < 4 {
			args = append(args, string(raw[start:start+min(size, 96)]))
		}
	}
	return raw, args, nil
}

// keyShape names the key a command touches with its variable parts
// masked: " egbe:pin:*". Scripts name their first key.
func keyShape(name string, args []string) string {
	key := ""
	switch name {
	case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
		if len(args) > 3 {
			if nk, _ := strconv.Atoi(args[2]); nk > 0 {
				key = args[3]
			}
		}
	case "multi", "exec", "ping", "discard":
	default:
		if len(args) > 1 {
			key = args[1]
		}
	}
	if key == "" {
		return ""
	}
	segs := strings.Split(key, ":")
	for i, s := range segs {
		if strings.ContainsAny(s, "0123456789") || len(s) > 24 {
			segs[i] = "*"
		}
	}
	return " " + strings.Join(segs, ":")
}
