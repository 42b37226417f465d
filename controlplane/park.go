package controlplane

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nixfleet/nixfleet/codes"
)

// Parked long-polls (rfcs/0006 §Check-ins at scale 5). An agent spends
// nearly all its life in a long-poll, so a connected host would cost the
// goroutine that serves its connection (with the stack TLS grew), the
// HTTP server's read and write buffers, and a second goroutine that
// watches for the client going away: about 40 KiB. A long-poll that must
// wait is parked instead: the check-in handler takes the connection from
// the HTTP server (Hijack), drops its buffers and returns, and the hub
// calls back when the host's activation changes or the wait runs out (an
// AfterFunc timer, no goroutine). Then a short-lived goroutine writes the
// answer on the connection, as the handler would have; once the agent's
// next request starts to arrive, the connection goes to a second HTTP
// server with the same handler and limits, which serves that request as
// on any kept connection. A parked connection holds only its TLS state
// and socket.
//
// Between the answer and the next request the connection is idle, and may
// stay so for the HTTP server's IdleTimeout, as any kept connection. The
// second server cannot keep that wait itself: net/http gives the first
// request of a connection it accepts ReadHeaderTimeout from when it starts
// reading, and IdleTimeout only between requests it served. An agent may
// pause longer than ReadHeaderTimeout (it activates a closure), so each
// answered long-poll would lose its connection, and a fleet would come
// back with a storm of TLS handshakes. So a small goroutine waits,
// without reading a byte, until the connection turns readable (the next
// request's first bytes) or IdleTimeout runs out (the connection is then
// closed, as the HTTP server closes an idle one); only then is the
// connection handed over, and ReadHeaderTimeout runs from the request's
// first byte. While it waits, a connection holds its TLS state, socket
// and that goroutine, which uses little stack (it starts at Go's
// smallest, 2 KiB, unless the process's goroutines use more on average),
// but no HTTP server buffers: the second server allocates them when it
// starts serving it.
//
// Only HTTP/1.1 keep-alive requests are parked, whose connection holds no
// byte the client sent past the request; any other long-poll waits on its
// goroutine as before. A client that goes away while parked is noticed
// when its answer cannot be written (its wait is at most maxFollowWait).
// At shutdown every parked long-poll is answered at once, with
// "Connection: close", and every connection waiting idle is closed.

// errParked is what the check-in handler returns for a long-poll it
// parked: nothing is written, and the request is counted when answered.
// It is never written: it has no code.
var errParked = new(codes.Error)

// parkWriteTimeout bounds writing a parked long-poll's answer.
const parkWriteTimeout = 10 * time.Second

// lot holds the parked long-polls of a replica, and serves their
// connections once answered.
type lot struct {
	log    *slog.Logger
	srv    *http.Server // serves the connections of answered long-polls
	ln     *handoff
	parked prometheus.Gauge
	// answered counts the answers written (as the HTTP server's requests).
	answered prometheus.Counter

	mu    sync.Mutex
	polls map[*parkedPoll]struct{}
	// idle are the answered connections waiting for their next request
	// (rest); resting counts the goroutines that wait on them.
	idle    map[net.Conn]struct{}
	resting sync.WaitGroup
	closing bool
}

// newLot makes a lot whose answered connections main's twin serves.
func newLot(main *http.Server, log *slog.Logger, parked prometheus.Gauge, answered prometheus.Counter) *lot {
	srv := &http.Server{Handler: main.Handler, ReadHeaderTimeout: main.ReadHeaderTimeout, IdleTimeout: main.IdleTimeout,
		MaxHeaderBytes: main.MaxHeaderBytes, ErrorLog: main.ErrorLog}
	return &lot{log: log, srv: srv, ln: newHandoff(), parked: parked, answered: answered, polls: map[*parkedPoll]struct{}{},
		idle: map[net.Conn]struct{}{}}
}

// serve serves the handed-back connections until close.
func (l *lot) serve() { _ = l.srv.Serve(l.ln) }

// parkedPoll is one parked long-poll.
type parkedPoll struct {
	conn   net.Conn
	answer func() any // the answer's body, made when it is written
	stop   func()     // ends the hub's wait
	done   atomic.Bool
}

// park takes over the connection of a long-poll that must wait, and
// reports whether it did: false leaves the request to its handler. The
// hub's park (wait) is called with fire, which answers; answer makes the
// body at that time.
func (l *lot) park(w http.ResponseWriter, r *http.Request, answer func() any,
	wait func(fire func()) (stop func(), ok bool)) bool {
	if l == nil || r.ProtoMajor != 1 || r.ProtoMinor < 1 || r.Close {
		return false
	}
	l.mu.Lock()
	closing := l.closing
	l.mu.Unlock()
	if closing {
		return false
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return false // not a connection of this process's HTTP/1 server
	}
	p := &parkedPoll{conn: conn, answer: answer}
	if brw.Reader.Buffered() > 0 {
		// The client sent more than this request (pipelining): answer now
		// and close, rather than lose or reorder its bytes.
		go l.respond(p, true)
		return true
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		go l.respond(p, true)
		return true
	}
	l.polls[p] = struct{}{}
	l.mu.Unlock()
	l.parked.Inc()
	stop, ok := wait(func() { go l.respond(p, false) })
	if !ok {
		go l.respond(p, false) // its activation changed already
		return true
	}
	l.mu.Lock()
	p.stop = stop
	l.mu.Unlock()
	return true
}

// respond writes a parked long-poll's answer, once, and hands its
// connection back to be served once the next request comes (or closes it,
// when closing or when the lot closes).
func (l *lot) respond(p *parkedPoll, closing bool) {
	if !p.done.CompareAndSwap(false, true) {
		return
	}
	l.mu.Lock()
	if _, ok := l.polls[p]; ok {
		delete(l.polls, p)
		l.parked.Dec()
	}
	closing = closing || l.closing
	stop := p.stop
	l.mu.Unlock()
	if stop != nil {
		stop()
	}
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(p.answer()); err != nil {
		l.log.Error("encoding a long-poll's answer", "err", err)
		_ = p.conn.Close()
		return
	}
	var head bytes.Buffer
	head.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nDate: ")
	head.WriteString(time.Now().UTC().Format(http.TimeFormat))
	head.WriteString("\r\nContent-Length: ")
	head.WriteString(strconv.Itoa(body.Len()))
	if closing {
		head.WriteString("\r\nConnection: close")
	}
	head.WriteString("\r\n\r\n")
	_ = p.conn.SetWriteDeadline(time.Now().Add(parkWriteTimeout))
	bufs := net.Buffers{head.Bytes(), body.Bytes()}
	_, err := bufs.WriteTo(p.conn)
	l.answered.Inc()
	if err != nil || closing {
		_ = p.conn.Close() // the client is gone, or the replica stops
		return
	}
	_ = p.conn.SetWriteDeadline(time.Time{})
	l.rest(p.conn)
}

// rest hands an answered connection to the twin server once the next
// request starts to arrive: a goroutine of its own (await) waits, without
// reading, until the connection turns readable, for at most the server's
// idle timeout. A connection that stays idle that long, or that the lot
// closes meanwhile, is closed. A connection whose socket cannot be waited
// on (not a syscall.Conn) is handed over at once. The connection is
// handed over as it came, a *tls.Conn, since the handler reads the
// client's certificate from the request's TLS state.
//
// crypto/tls may have read past the request's last record (it reads what
// the socket holds), and the socket no longer shows those bytes. The
// client sent them before its answer, so they can only be pipelined
// bytes, which park refuses when net/http saw them; should crypto/tls
// alone hold a whole next request, the socket stays quiet, the connection
// is closed at the idle timeout, and the client sends it again on a new
// one.
func (l *lot) rest(c net.Conn) {
	raw := c
	if tc, ok := c.(*tls.Conn); ok {
		raw = tc.NetConn()
	}
	sc, ok := raw.(syscall.Conn)
	if !ok {
		l.ln.give(c)
		return
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		l.ln.give(c)
		return
	}
	// As net/http's idle timeout: IdleTimeout, else ReadTimeout.
	idle := l.srv.IdleTimeout
	if idle == 0 {
		idle = l.srv.ReadTimeout
	}
	if idle > 0 {
		_ = raw.SetReadDeadline(time.Now().Add(idle))
	}
	l.mu.Lock()
	if l.closing {
		l.mu.Unlock()
		_ = c.Close()
		return
	}
	l.idle[c] = struct{}{}
	l.resting.Add(1)
	l.mu.Unlock()
	// A goroutine of its own, not this one: this one's stack grew writing
	// the answer, and with respond's frames under the wait it would not
	// shrink back (measured: 4 KiB a connection, against 2 KiB).
	go l.await(c, rc)
}

// await is the goroutine of a connection waiting idle. Its stack is what
// the wait costs, so it holds little: the poller waits while readable
// reports false, until the deadline or until the lot closes the
// connection; woken does the rest.
func (l *lot) await(c net.Conn, rc syscall.RawConn) {
	l.woken(c, rc.Read(readable))
}

// woken ends a connection's idle wait: it hands the connection to the
// twin server if it turned readable, or closes it.
func (l *lot) woken(c net.Conn, err error) {
	defer l.resting.Done()
	l.mu.Lock()
	delete(l.idle, c)
	closing := l.closing
	l.mu.Unlock()
	if err != nil || closing {
		_ = c.Close()
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	l.ln.give(c)
}

// readable reports whether the socket fd has a byte to read, or an end or
// error to report, without taking the byte: false while a read would
// block. It asks the socket itself each time, rather than trusting a
// first call to find nothing: the poller forgets readiness it saw before
// the wait began, so data that came before would not wake it.
func readable(fd uintptr) bool {
	var b [1]byte
	for {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		if err != syscall.EINTR {
			return err != syscall.EAGAIN
		}
	}
}

// close answers every parked long-poll at once, with "Connection: close",
// closes every connection waiting idle and waits until their goroutines
// end, and parks no more; the twin server is shut down by Shutdown.
func (l *lot) close() {
	l.mu.Lock()
	l.closing = true
	polls := make([]*parkedPoll, 0, len(l.polls))
	for p := range l.polls {
		polls = append(polls, p)
	}
	idle := make([]net.Conn, 0, len(l.idle))
	for c := range l.idle {
		idle = append(idle, c)
	}
	l.mu.Unlock()
	// Closing wakes the goroutine in await, which then sees closing: none
	// of these connections is handed over any more.
	for _, c := range idle {
		_ = c.Close()
	}
	var wg sync.WaitGroup
	for _, p := range polls {
		wg.Add(1)
		go func() { defer wg.Done(); l.respond(p, true) }()
	}
	wg.Wait()
	l.resting.Wait()
}

// handoff is the listener of the lot's server: it accepts the
// connections the lot gives back.
type handoff struct {
	ch     chan net.Conn
	done   chan struct{}
	closed sync.Once
}

func newHandoff() *handoff {
	return &handoff{ch: make(chan net.Conn, 64), done: make(chan struct{})}
}

// give queues a connection to be served (closing it when the listener is
// closed).
func (h *handoff) give(c net.Conn) {
	select {
	case h.ch <- c:
	case <-h.done:
		_ = c.Close()
	}
}

func (h *handoff) Accept() (net.Conn, error) {
	select {
	case c := <-h.ch:
		return c, nil
	case <-h.done:
		return nil, net.ErrClosed
	}
}

func (h *handoff) Close() error {
	h.closed.Do(func() { close(h.done) })
	return nil
}

func (h *handoff) Addr() net.Addr { return handoffAddr{} }

type handoffAddr struct{}

func (handoffAddr) Network() string { return "handoff" }
func (handoffAddr) String() string  { return "parked long-polls" }
