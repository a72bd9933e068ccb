// A small read-only HTTP server for a node's metrics and pages (civetweb, which prometheus-cpp's
// own exposer uses too), on threads of its own: a slow or hostile client can hold those
// threads, never the node's data or control threads, which only publish values the pages read.
//
// Limits: `threads` request threads, each request must arrive whole within
// `request_timeout_ms` and fit in `max_request_bytes` (a never-ending header is cut off);
// no keep-alive. Memory is bounded whatever clients do: a request buffer of max_request_bytes
// per thread, at most `queued_connections` accepted connections waiting for a thread (then
// civetweb stops accepting), at most `listen_backlog` more in the kernel, beyond which the
// kernel refuses them. Many idle clients delay the pages (each holds a thread for the request
// timeout), never the node. Answers: the registered paths to GET and HEAD; 405 to any other
// method; 404 to any other path; malformed requests get 400 from civetweb. Binds loopback unless
// the address says otherwise.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "bytecomp/telemetry/metrics.h"

struct mg_context;
struct mg_connection;

namespace bytecomp::telemetry {

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; version=0.0.4; charset=utf-8";
  std::string body;
};

struct HttpOptions {
  // host:port; port 0 picks a free one (port() tells which). "127.0.0.1:0" by default.
  std::string address = "127.0.0.1:0";
  int threads = 2;
  int request_timeout_ms = 2000;
  int max_request_bytes = 8192;
  int queued_connections = 16;
  int listen_backlog = 32;
};

class HttpServer {
 public:
  using Page = std::function<HttpResponse()>;
  // Starts serving `pages` (exact paths, e.g. "/metrics"). The error names the address.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpOptions& options,
                                                           std::map<std::string, Page> pages);
  // Stops: waits for requests being served (at most their timeout).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // "http://host:port".
  std::string url() const { return url_; }

 private:
  HttpServer(std::map<std::string, Page> pages) : pages_(std::move(pages)) {}
  static int Handle(mg_connection* conn, void* self);

  const std::map<std::string, Page> pages_;  // read-only once started: no lock
  mg_context* context_ = nullptr;
  int port_ = 0;
  std::string url_;
};

// The Prometheus text exposition of `metrics` (NodeMetrics::Render), for a "/metrics" page.
HttpServer::Page MetricsPage(NodeMetrics* metrics);

// Serves `metrics` at `address`/metrics (NodeMetrics::Render); null, logged, when the address
// cannot be served. Logs the URL ("metrics on http://127.0.0.1:PORT/metrics").
std::unique_ptr<HttpServer> ServeMetrics(const std::string& address, NodeMetrics* metrics);

// Where a node serves HTTP: `flag` if set, else the environment variable `env_name`; empty:
// not at all. A bare port ("9100") binds loopback.
std::string HttpAddress(const std::string& flag, const char* env_name);

}  // namespace bytecomp::telemetry
