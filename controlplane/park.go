package controlplane

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
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
// answer on the connection, as the handler would have, and hands the
// connection to a second HTTP server with the same handler and limits,
// which serves the agent's next request on it as on any kept connection.
// A parked connection holds only its TLS state and socket.
//
// Only HTTP/1.1 keep-alive requests are parked, whose connection holds no
// byte the client sent past the request; any other long-poll waits on its
// goroutine as before. A client that goes away while parked is noticed
// when its answer cannot be written (its wait is at most maxFollowWait).
// At shutdown every parked long-poll is answered at once, with
// "Connection: close".

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

	mu      sync.Mutex
	polls   map[*parkedPoll]struct{}
	closing bool
}

// newLot makes a lot whose answered connections main's twin serves.
func newLot(main *http.Server, log *slog.Logger, parked prometheus.Gauge, answered prometheus.Counter) *lot {
	srv := &http.Server{Handler: main.Handler, ReadHeaderTimeout: main.ReadHeaderTimeout, IdleTimeout: main.IdleTimeout,
		MaxHeaderBytes: main.MaxHeaderBytes, ErrorLog: main.ErrorLog}
	return &lot{log: log, srv: srv, ln: newHandoff(), parked: parked, answered: answered, polls: map[*parkedPoll]struct{}{}}
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
// connection back to be served (or closes it, when closing or when the
// lot closes).
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
	l.ln.give(p.conn)
}

// close answers every parked long-poll at once, with "Connection: close",
// and parks no more; the twin server is shut down by Shutdown.
func (l *lot) close() {
	l.mu.Lock()
	l.closing = true
	polls := make([]*parkedPoll, 0, len(l.polls))
	for p := range l.polls {
		polls = append(polls, p)
	}
	l.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range polls {
		wg.Add(1)
		go func() { defer wg.Done(); l.respond(p, true) }()
	}
	wg.Wait()
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
