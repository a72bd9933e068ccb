// The telemetry part's door: what a node uses to be seen while it runs.
//   timeline.h     the runtime timeline (Chrome trace JSON per node)
//   metrics.h      Prometheus metrics (prometheus-cpp) with cheap data-path counters
//   http_server.h  a read-only HTTP server on its own threads for /metrics and pages
#pragma once

#include "bytecomp/telemetry/http_server.h"
#include "bytecomp/telemetry/metrics.h"
#include "bytecomp/telemetry/timeline.h"
