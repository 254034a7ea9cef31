// Go net/http (tests/real_http_servers.py): `go-app PORT [flags]` listens on
// 127.0.0.1:PORT; GET / answers 200 with a short body, /sleep after -sleep-ms (20 ms),
// anything else 404. Standard library only; net/http's defaults (keep-alive, no idle
// timeout). HTTP/2 (tests/test_http2.py): -tls CERT,KEY serves TLS with h2 by ALPN (and
// HTTP/1.1), -h2c cleartext HTTP/2 by prior knowledge (and HTTP/1.1), -max-streams N sets
// SETTINGS_MAX_CONCURRENT_STREAMS (both need Go 1.24+: h2_go124.go; TLS alone is any Go).
package main

import (
	"flag"
	"log"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"knee.test/hello"
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: go-app PORT [-tls CERT,KEY] [-h2c] [-max-streams N] [-sleep-ms MS] [-slots N]")
	}
	port := os.Args[1]
	flags := flag.NewFlagSet("go-app", flag.ExitOnError)
	tlsFiles := flags.String("tls", "", "CERT,KEY: serve TLS (h2 by ALPN, and HTTP/1.1)")
	h2c := flags.Bool("h2c", false, "serve cleartext HTTP/2 by prior knowledge too")
	maxStreams := flags.Int("max-streams", 0, "SETTINGS_MAX_CONCURRENT_STREAMS (0: Go's default)")
	sleepMs := flags.Int("sleep-ms", 20, "how long /sleep takes")
	slots := flags.Int("slots", 0, "at most N /sleep requests at once, the others wait (0: no limit)")
	flags.Parse(os.Args[2:])
	// A semaphore of N slots: /sleep's capacity is N / sleep by construction.
	var sem chan struct{}
	if *slots > 0 {
		sem = make(chan struct{}, *slots)
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/", hello.Root)
	mux.HandleFunc("/sleep", func(w http.ResponseWriter, r *http.Request) {
		if sem != nil {
			sem <- struct{}{}
			defer func() { <-sem }()
		}
		time.Sleep(time.Duration(*sleepMs) * time.Millisecond)
		w.Header().Set("Server-Timing", "app;dur="+strconv.Itoa(*sleepMs))
		w.Write(hello.Body)
	})
	srv := &http.Server{Addr: "127.0.0.1:" + port, Handler: mux}
	if *h2c || *maxStreams > 0 {
		configureHTTP2(srv, *h2c, *maxStreams) // h2_go124.go: Go 1.24 and later
	}
	if *tlsFiles != "" {
		files := strings.SplitN(*tlsFiles, ",", 2)
		if len(files) != 2 {
			log.Fatal("-tls CERT,KEY")
		}
		log.Fatal(srv.ListenAndServeTLS(files[0], files[1]))
	}
	log.Fatal(srv.ListenAndServe())
}
