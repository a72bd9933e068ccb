// Small statistics shared by the profilers and probes.
#pragma once

#include <vector>

namespace bytecomp {

// The median of v (the upper one of the two middle values for an even count); 0 when empty.
double Median(std::vector<double> v);

}  // namespace bytecomp
