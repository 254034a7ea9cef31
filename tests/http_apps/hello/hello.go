// Package hello is what the Go test servers (go_app, go_h2) answer at GET /: a short body,
// and 404 for any other path. Standard library only.
package hello

import (
	"net/http"
	"strconv"
)

// Body is the answer to GET /.
var Body = []byte("hello from go\n")

// Root answers GET / with Body (text/plain, its length said), any other path 404.
func Root(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/" {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "text/plain")
	w.Header().Set("Content-Length", strconv.Itoa(len(Body)))
	w.Write(Body)
}
