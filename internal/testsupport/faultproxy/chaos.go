package faultproxy

import (
	"net"
	"sync"
	"time"
)

// Chaos is a TCP proxy whose links a fault injector degrades while traffic
// flows: Delay holds every chunk for a while, Blackhole holds all traffic
// (the connections stay open, as in a network partition) until Heal delivers
// it late, and Cut closes every connection at once. Unlike Proxy it has no
// per-statement rules; it models the network, not one statement's fate. It
// listens on 127.0.0.1 only.
type Chaos struct {
	ln     net.Listener
	dial   func() (net.Conn, error)
	mu     sync.Mutex
	delay  time.Duration
	healed chan struct{} // nil when traffic flows; closed by Heal
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// NewChaos starts a chaos proxy on 127.0.0.1 that dials upstream with dial.
func NewChaos(dial func() (net.Conn, error)) (*Chaos, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	c := &Chaos{ln: ln, dial: dial, conns: map[net.Conn]struct{}{}}
	c.wg.Add(1)
	go c.accept()
	return c, nil
}

// Port is the loopback port clients connect to.
func (c *Chaos) Port() uint16 { return uint16(c.ln.Addr().(*net.TCPAddr).Port) }

// Delay holds each chunk of traffic, both ways, for d before forwarding it
// (0 forwards at once).
func (c *Chaos) Delay(d time.Duration) {
	c.mu.Lock()
	c.delay = d
	c.mu.Unlock()
}

// Blackhole stops forwarding in both directions; what is sent meanwhile is
// held, not dropped, and arrives when Heal is called (late, as after a
// partition heals).
func (c *Chaos) Blackhole() {
	c.mu.Lock()
	if c.healed == nil {
		c.healed = make(chan struct{})
	}
	c.mu.Unlock()
}

// Heal ends a blackhole.
func (c *Chaos) Heal() {
	c.mu.Lock()
	if c.healed != nil {
		close(c.healed)
		c.healed = nil
	}
	c.mu.Unlock()
}

// Cut closes every open connection; new ones are accepted as before.
func (c *Chaos) Cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for conn := range c.conns {
		conn.Close()
	}
}

// Close heals, stops the proxy and closes every connection.
func (c *Chaos) Close() error {
	c.Heal()
	c.mu.Lock()
	c.closed = true
	for conn := range c.conns {
		conn.Close()
	}
	c.mu.Unlock()
	err := c.ln.Close()
	c.wg.Wait()
	return err
}

func (c *Chaos) track(conn net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return false
	}
	c.conns[conn] = struct{}{}
	return true
}

func (c *Chaos) untrack(conn net.Conn) {
	c.mu.Lock()
	delete(c.conns, conn)
	c.mu.Unlock()
	conn.Close()
}

func (c *Chaos) accept() {
	defer c.wg.Done()
	for {
		client, err := c.ln.Accept()
		if err != nil {
			return
		}
		server, err := c.dial()
		if err != nil {
			client.Close()
			continue
		}
		if !c.track(client) || !c.track(server) {
			client.Close()
			server.Close()
			return
		}
		c.wg.Add(2)
		go c.pipe(client, server)
		go c.pipe(server, client)
	}
}

// pipe forwards from src to dst, chunk by chunk, obeying the current fault;
// when either side ends, both are closed.
func (c *Chaos) pipe(src, dst net.Conn) {
	defer c.wg.Done()
	defer c.untrack(dst)
	defer c.untrack(src)
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !c.wait(src) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait holds a chunk while the link is blackholed, then for the current
// delay. It returns false if the proxy closed meanwhile.
func (c *Chaos) wait(src net.Conn) bool {
	for {
		c.mu.Lock()
		healed, delay, closed := c.healed, c.delay, c.closed
		_, open := c.conns[src]
		c.mu.Unlock()
		if closed || !open {
			return false
		}
		if healed == nil {
			if delay > 0 {
				time.Sleep(delay)
			}
			return true
		}
		select {
		case <-healed:
		case <-time.After(50 * time.Millisecond): // notice Cut and Close
		}
	}
}
