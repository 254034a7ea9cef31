// Go net/http over HTTP/2 (tests/real_http_servers.py: go-h2c, go-h2-tls; the benches):
// `go-h2 PORT` listens on 127.0.0.1:PORT and speaks HTTP/1.1 and cleartext HTTP/2 by prior
// knowledge (h2c) on the same port; `go-h2 PORT CERT KEY` speaks TLS, HTTP/2 chosen by
// ALPN (h2), HTTP/1.1 for clients that do not offer it. GET / answers 200 with a short body,
// anything else 404. Standard library only (Go >= 1.24: http.Server.Protocols and
// HTTP2Config); GOMAXPROCS is the CPUs the process may run on.
package main

import (
	"log"
	"net/http"
	"os"

	"knee.test/hello"
)

// maxStreams is SETTINGS_MAX_CONCURRENT_STREAMS: Go's default (250), said here so that a
// bench's streams per connection (at most 250) never meet it.
const maxStreams = 250

func main() {
	if len(os.Args) != 2 && len(os.Args) != 4 {
		log.Fatal("usage: go-h2 PORT [CERT KEY]")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/", hello.Root)
	protocols := new(http.Protocols)
	protocols.SetHTTP1(true)
	tls := len(os.Args) == 4
	if tls {
		protocols.SetHTTP2(true)
	} else {
		protocols.SetUnencryptedHTTP2(true)
	}
	server := &http.Server{
		Addr:      "127.0.0.1:" + os.Args[1],
		Handler:   mux,
		Protocols: protocols,
		HTTP2:     &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
	}
	if tls {
		log.Fatal(server.ListenAndServeTLS(os.Args[2], os.Args[3]))
	}
	log.Fatal(server.ListenAndServe())
}
