// Small builders the planner's tests share.
#pragma once

#include <cstdint>
#include <string>

#include "planner.pb.h"

namespace bytecomp::planner::testing {

// The shipped planner inputs: profiles/, clusters/, costs/ (scheduler/planner).
inline const std::string kPlannerDir = BYTECOMP_PLANNER_DIR;

inline proto::CostPoint Point(int64_t bytes, double us) {
  proto::CostPoint p;
  p.set_bytes(bytes);
  p.set_us(us);
  return p;
}

// `machines` CPU machines and `servers` servers, every machine's and server's link at `gbps`.
inline proto::ClusterDescription Cluster(int machines, int servers, double gbps) {
  proto::ClusterDescription c;
  c.set_machines(machines);
  c.set_servers(servers);
  c.mutable_worker_link()->set_bandwidth_gbps(gbps);
  c.mutable_server_link()->set_bandwidth_gbps(gbps);
  return c;
}

// A gradient tensor `name` of `elements` fp32.
inline proto::TensorProfile Tensor(int64_t elements, const std::string& name = "w") {
  proto::TensorProfile t;
  t.set_name(name);
  t.set_elements(elements);
  return t;
}

}  // namespace bytecomp::planner::testing
