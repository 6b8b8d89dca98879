// Package faultproxy is a TCP proxy for tests that breaks PostgreSQL
// connections at chosen moments: after a statement has been sent to the
// server, it can swallow the server's answer and cut the client off, which is
// the "ambiguous outcome" a real network can produce (the statement ran, the
// client never heard). It only ever listens on and dials loopback or Unix
// sockets.
package faultproxy
