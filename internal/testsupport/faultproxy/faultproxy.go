package faultproxy

import (
	"bytes"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Proxy forwards connections from a loopback listener to an upstream server.
type Proxy struct {
	ln     net.Listener
	dial   func() (net.Conn, error)
	mu     sync.Mutex
	rule   *rule
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	closed bool
	done   chan struct{} // closed by Close: ends a delay early
	silent atomic.Bool   // Silence: nothing more reaches the server
}

// rule is one armed fault. Both kinds mute the server's answer to the
// marked message; a cut closes the client's connection cutAfter after the
// message was forwarded, a delay holds the message back for delay first.
type rule struct {
	marker   []byte
	cutAfter time.Duration // for a cut
	delay    time.Duration // > 0: a delay, not a cut
	fired    chan struct{}
}

// New starts a proxy on 127.0.0.1 that dials upstream with dial.
func New(dial func() (net.Conn, error)) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &Proxy{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}, done: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Port is the loopback port clients connect to.
func (p *Proxy) Port() uint16 { return uint16(p.ln.Addr().(*net.TCPAddr).Port) }

// CutAfterSending arms a one-shot fault: the first client message that
// contains marker is forwarded to the server, but from then on nothing the
// server sends on that connection reaches the client, and the client's
// connection is closed after cut. The returned channel is closed when the
// fault fired.
func (p *Proxy) CutAfterSending(marker string, cut time.Duration) <-chan struct{} {
	r := &rule{marker: []byte(marker), cutAfter: cut, fired: make(chan struct{})}
	p.mu.Lock()
	p.rule = r
	p.mu.Unlock()
	return r.fired
}

// DelayDelivery arms a one-shot fault: the first client message that contains
// marker is held back for delay, then forwarded to the server, even if the
// client has closed its connection meanwhile (the server reads the bytes,
// then the end of the connection). Nothing the server sends on that
// connection from then on reaches the client. It is a request that the
// network delivers late, after its sender gave up. The returned channel is
// closed once the message was handed to the server.
func (p *Proxy) DelayDelivery(marker string, delay time.Duration) <-chan struct{} {
	r := &rule{marker: []byte(marker), delay: delay, fired: make(chan struct{})}
	p.mu.Lock()
	p.rule = r
	p.mu.Unlock()
	return r.fired
}

// Silence makes the server go silent without closing anything, as a
// network partition that drops packets does: from now on no client message
// on any connection, open or new, reaches the server (so no answer comes
// back either), and every connection stays open until its client closes it.
func (p *Proxy) Silence() { p.silent.Store(true) }

// Close stops the proxy and closes every connection; a delayed message is
// dropped.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if !p.closed {
		close(p.done)
	}
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	p.wg.Wait()
	return err
}

func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := p.dial()
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client) || !p.track(server) {
			client.Close()
			server.Close()
			return
		}
		p.wg.Add(2)
		var mute sync.Once
		muted := make(chan struct{})
		go func() { // client -> server
			defer p.wg.Done()
			defer server.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 && p.silent.Load() {
					n = 0 // swallowed: the server never hears of it
				}
				if n > 0 {
					// Mute the answer before the statement leaves, so no
					// byte of the reply can slip through.
					r := p.take(buf[:n])
					if r != nil {
						mute.Do(func() { close(muted) })
						if r.delay > 0 && !p.sleep(r.delay) {
							return
						}
					}
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
					if r != nil {
						close(r.fired)
						if r.delay == 0 { // a cut
							time.AfterFunc(r.cutAfter, func() { client.Close() })
						}
					}
				}
				if err != nil {
					return
				}
			}
		}()
		go func() { // server -> client, until muted
			defer p.wg.Done()
			defer client.Close()
			buf := make([]byte, 32<<10)
			for {
				n, err := server.Read(buf)
				select {
				case <-muted:
					io.Copy(io.Discard, server)
					return
				default:
				}
				if n > 0 {
					if _, werr := client.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					return
				}
			}
		}()
	}
}

// sleep waits d, or less if the proxy is closed meanwhile; it reports
// whether d passed.
func (p *Proxy) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-p.done:
		return false
	}
}

// take returns the armed rule if data contains its marker, disarming it.
func (p *Proxy) take(data []byte) *rule {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.rule == nil || !bytes.Contains(data, p.rule.marker) {
		return nil
	}
	r := p.rule
	p.rule = nil
	return r
}
