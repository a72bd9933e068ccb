// Which codecs of the cost table may serve a tensor, from what the user accepts for it
// (PlannerOptions.allowed): the planner never picks a codec lossier than one the user listed,
// so a planned run keeps the accuracy the user accepted.
//
// A codec of the cost table is no lossier than a listed one when it is
//  - lossless (compress CodecIsLossless): blocksparse or threshold with threshold 0 (they drop
//    only zeros);
//  - the same codec, every parameter the listed entry names equal, except ratio, which may be
//    larger (more kept); parameters the entry leaves out take any value;
//  - a codec of the listed one's selection (compress CodecFacts::selection: topk and artopk,
//    "top-k"), with a ratio at least the listed one's: both send k = ratio * n values per
//    worker with error feedback, gathered (topk: the servers' union of every worker's own
//    indices) or summed (artopk: one worker's indices); the planner picks between them by
//    time (the digits test holds artopk 1% within 1.5 points of uncompressed accuracy, as
//    topk).
// Uncompressed is always allowed. Re-encoding the sum for pulls (two-way) loses more than the
// push alone: only with TensorAllowance.allow_two_way. The servers' sparse union (the gather
// style) and one-way pulls lose nothing beyond the push.
#pragma once

#include "absl/strings/string_view.h"
#include "planner.pb.h"

namespace bytecomp::planner {

// The first entry of options.allowed whose name_pattern matches `tensor`; nullptr if none
// (the tensor may then use every codec the options allow).
const proto::TensorAllowance* AllowanceFor(const proto::PlannerOptions& options,
                                           absl::string_view tensor);

// The codec with its parameters loses nothing (compress CodecIsLossless).
bool IsLossless(const proto::CodecCost& codec);

// Whether `codec` is no lossier than one of the allowance's codecs (the rules above).
bool CodecAllowedBy(const proto::CodecCost& codec, const proto::TensorAllowance& allowance);

// Whether the sum may be re-encoded with the push codec for pulls (two-way): always without an
// allowance, else when it says so.
bool TwoWayAllowed(const proto::TensorAllowance* allowance);

}  // namespace bytecomp::planner
