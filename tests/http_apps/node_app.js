// Node's http module (tests/real_http_servers.py): `node node_app.js PORT` listens on
// 127.0.0.1:PORT; GET / answers 200 with a short body, anything else 404. Keep-alive with
// Node's defaults (idle connections closed after 5 s).
"use strict";
const http = require("http");

const port = Number(process.argv[2]);
const body = "hello from node\n";
const server = http.createServer((req, res) => {
  const ok = req.url === "/";
  res.writeHead(ok ? 200 : 404, {
    "Content-Type": "text/plain",
    "Content-Length": ok ? Buffer.byteLength(body) : 0,
  });
  res.end(ok ? body : "");
});
server.listen(port, "127.0.0.1");
