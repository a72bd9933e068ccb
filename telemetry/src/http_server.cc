#include "bytecomp/telemetry/http_server.h"

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "bytecomp/common/logging.h"
#include "civetweb.h"

namespace bytecomp::telemetry {
namespace {

void InitCivetweb() {
  static std::once_flag once;
  std::call_once(once, [] { mg_init_library(0); });
}

// civetweb's own complaints (a client that went away, a bad request) are the client's business.
int QuietLog(const mg_connection*, const char* message) {
  BC_LOG_DEBUG("http: ", message);
  return 1;
}

const char* Reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 503:
      return "Service Unavailable";
    default:
      return "Error";
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpOptions& options,
                                                              std::map<std::string, Page> pages) {
  InitCivetweb();
  std::unique_ptr<HttpServer> server(new HttpServer(std::move(pages)));
  const std::string threads = absl::StrCat(options.threads);
  const std::string timeout = absl::StrCat(options.request_timeout_ms);
  const std::string max_request = absl::StrCat(options.max_request_bytes);
  const std::string queue = absl::StrCat(options.queued_connections);
  const std::string backlog = absl::StrCat(options.listen_backlog);
  const char* config[] = {"listening_ports",
                          options.address.c_str(),
                          "num_threads",
                          threads.c_str(),
                          "request_timeout_ms",
                          timeout.c_str(),
                          "max_request_size",
                          max_request.c_str(),
                          "connection_queue",
                          queue.c_str(),
                          "listen_backlog",
                          backlog.c_str(),
                          "enable_keep_alive",
                          "no",
                          "linger_timeout_ms",
                          "0",
                          nullptr};
  mg_callbacks callbacks;
  std::memset(&callbacks, 0, sizeof(callbacks));
  callbacks.log_message = QuietLog;
  server->context_ = mg_start(&callbacks, nullptr, config);
  if (server->context_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", options.address,
                                               " (port in use, or a bad address?)"));
  }
  mg_set_request_handler(server->context_, "/", &HttpServer::Handle, server.get());
  mg_server_port ports[4];
  const int n = mg_get_server_ports(server->context_, 4, ports);
  if (n < 1) return absl::InternalError("HTTP server started without a listening port");
  server->port_ = ports[0].port;
  std::string host = options.address.substr(0, options.address.rfind(':'));
  if (host.empty() || options.address.find(':') == std::string::npos) host = "127.0.0.1";
  server->url_ = absl::StrCat("http://", host, ":", server->port_);
  return server;
}

HttpServer::~HttpServer() {
  if (context_ != nullptr) mg_stop(context_);
}

int HttpServer::Handle(mg_connection* conn, void* self_ptr) {
  const auto* self = static_cast<const HttpServer*>(self_ptr);
  const mg_request_info* info = mg_get_request_info(conn);
  HttpResponse response;
  const std::string method = info->request_method != nullptr ? info->request_method : "";
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    response = {405, "text/plain; charset=utf-8", "read-only: only GET and HEAD\n"};
  } else {
    auto page = self->pages_.find(info->local_uri != nullptr ? info->local_uri : "");
    if (page == self->pages_.end()) {
      std::string known;
      for (const auto& [path, unused] : self->pages_) absl::StrAppend(&known, " ", path);
      response = {404, "text/plain; charset=utf-8",
                  absl::StrCat("no such page; pages:", known, "\n")};
    } else {
      response = page->second();
    }
  }
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            response.status, Reason(response.status), response.content_type.c_str(),
            response.body.size());
  if (!head) mg_write(conn, response.body.data(), response.body.size());
  return response.status;
}

HttpServer::Page MetricsPage(NodeMetrics* metrics) {
  return [metrics] {
    return HttpResponse{200, "text/plain; version=0.0.4; charset=utf-8", metrics->Render()};
  };
}

std::unique_ptr<HttpServer> ServeMetrics(const std::string& address, NodeMetrics* metrics) {
  std::map<std::string, HttpServer::Page> pages;
  pages["/metrics"] = MetricsPage(metrics);
  absl::StatusOr<std::unique_ptr<HttpServer>> http =
      HttpServer::Start(HttpOptions{address}, std::move(pages));
  if (!http.ok()) {
    BC_LOG_WARNING(http.status().message(), "; no metrics");
    return nullptr;
  }
  BC_LOG_INFO("metrics on ", (*http)->url(), "/metrics");
  return *std::move(http);
}

std::string HttpAddress(const std::string& flag, const char* env_name) {
  std::string address = flag;
  if (address.empty()) {
    const char* env = std::getenv(env_name);
    if (env != nullptr) address = env;
  }
  int port = 0;
  if (!address.empty() && absl::SimpleAtoi(address, &port)) {
    address = absl::StrCat("127.0.0.1:", port);
  }
  return address;
}

}  // namespace bytecomp::telemetry
