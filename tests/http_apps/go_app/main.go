// Go net/http (tests/real_http_servers.py): `go-app PORT` listens on 127.0.0.1:PORT;
// GET / answers 200 with a short body, anything else 404. Standard library only;
// net/http's defaults (keep-alive, no idle timeout).
package main

import (
	"log"
	"net/http"
	"os"
	"strconv"
)

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: go-app PORT")
	}
	body := []byte("hello from go\n")
	http.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.Write(body)
	})
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Args[1], nil))
}
