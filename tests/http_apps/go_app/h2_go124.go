//go:build go1.24

// HTTP/2 options of the standard library since Go 1.24: unencrypted HTTP/2 (h2c by prior
// knowledge) and SETTINGS_MAX_CONCURRENT_STREAMS, with no golang.org/x/net.
package main

import "net/http"

func configureHTTP2(srv *http.Server, h2c bool, maxStreams int) {
	if maxStreams > 0 {
		srv.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: maxStreams}
	}
	var protocols http.Protocols
	protocols.SetHTTP1(true)
	protocols.SetHTTP2(true)
	protocols.SetUnencryptedHTTP2(h2c)
	srv.Protocols = &protocols
}
