// The status page's renderings of a StatusSnapshot: a self-contained HTML page (inline CSS and
// SVG, no script, no external asset; it reloads itself every 2 s) and the same as JSON.
#pragma once

#include <string>

#include "bytecomp/scheduler/status/job_status.h"

namespace bytecomp::status {

std::string StatusPageHtml(const StatusSnapshot& snapshot);
std::string StatusJson(const StatusSnapshot& snapshot);
// The round-time chart alone (an <svg> element): round index against ms, with the prediction
// as a dashed line when there is one.
std::string RoundChartSvg(const StatusSnapshot& snapshot, int width, int height);

}  // namespace bytecomp::status
