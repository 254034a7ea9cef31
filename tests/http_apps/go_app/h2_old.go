//go:build !go1.24

// Before Go 1.24 the standard library has neither h2c nor a stream limit setting.
package main

import (
	"log"
	"net/http"
)

func configureHTTP2(_ *http.Server, _ bool, _ int) {
	log.Fatal("-h2c and -max-streams need Go 1.24 or later")
}
