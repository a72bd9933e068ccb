// The texts of format_error.h's codes: one place for every decoder's messages, CPU and GPU.
#include "bytecomp/compress/format/format_error.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "bytecomp/compress/codec_util.h"

namespace bytecomp::compress {
namespace {

const char* HeaderValueName(uint64_t what) {
  switch (what) {
    case kScaleValue:
      return "scale";
    case kNonNegativePartValue:
      return "value of non-negative elements";
    case kNegativePartValueNegated:
      return "value of negative elements (negated)";
    case kNormValue:
      return "norm";
    case kMaxAbsValue:
      return "max |x|";
  }
  return "header value";
}

float AsFloat(uint64_t bits) { return BitsToFloat(static_cast<uint32_t>(bits)); }

}  // namespace

std::string FormatErrorText(const FormatError& e) {
  using C = FormatErrorCode;
  switch (e.code) {
    case C::kNone:
      return "no error";
    case C::kPayloadSize:
      return absl::StrCat(e.a, " bytes for ", e.b, " elements (expected ", e.c, ")");
    case C::kPayloadTooShort:
      return absl::StrCat(e.a, " bytes for ", e.b, " elements (at least ", e.c, " expected)");
    case C::kShorterThanHeader:
      return absl::StrCat(e.a, " bytes, shorter than the header");
    case C::kSizeVsHeader:
      return absl::StrCat(e.a, " bytes, header says ", e.b);
    case C::kSizeVsExpected:
      return absl::StrCat(e.a, " bytes, expected ", e.b);
    case C::kElementCount:
      return absl::StrCat("payload for ", e.a, " elements decoded into ", e.b);
    case C::kMessageElementCount:
      return absl::StrCat("message holds ", e.a, " elements, expected ", e.b);
    case C::kUnknownVersion:
      return absl::StrCat("unknown version ", e.a);
    case C::kPayloadNotFinite:
      return "payload holds NaN or Inf";
    case C::kValuesNotFinite:
      return "values hold NaN or Inf";
    case C::kHeaderValueNotFinite:
      return absl::StrCat(HeaderValueName(e.a), " is not finite");
    case C::kHeaderValueNegative:
      return absl::StrCat(HeaderValueName(e.a), " is negative (", AsFloat(e.b), ")");
    case C::kBucketNormNotFinite:
      return absl::StrCat("norm of bucket ", e.a, " is not finite");
    case C::kBucketNormNegative:
      return absl::StrCat("norm of bucket ", e.a, " is negative (", AsFloat(e.b), ")");
    case C::kSignPaddingNotZero:
      return absl::StrCat("padding bits after element ", e.a, " are not zero");
    case C::kCodePaddingNotZero:
      return "padding bits after the last code are not zero";
    case C::kLevelAboveQuantum:
      return absl::StrCat("level ", e.a, " exceeds quantum_num ", e.b);
    case C::kTernaryCode3:
      return "ternary code 3";
    case C::kExponentLowRange:
      return absl::StrCat("exponent_low ", e.a, " outside 1..254");
    case C::kNaturalCodeRange:
      return absl::StrCat("code ", e.a, " with exponent_low ", e.b, " exceeds the float range");
    case C::kNaturalNegativeZero:
      return "byte 0x80 (negative zero) is not a code";
    case C::kLevelAboveK:
      return absl::StrCat("level ", e.a, " exceeds k ", e.b);
    case C::kU8bitNegativeZero:
      return absl::StrCat("byte 0x80 (negative zero) at element ", e.a);
    case C::kTagPaddingNotZero:
      return "padding bits after the last tag are not zero";
    case C::kFp32ValueNotFinite:
      return absl::StrCat("fp32 value ", e.a, " is not finite");
    case C::kMultipleOverflows:
      return "a stored multiple overflows the float range";
    case C::kBucketMeanNotFinite:
      return absl::StrCat("mean ", e.a, " is not finite");
    case C::kIdPaddingNotZero:
      return "padding bits after the last id are not zero";
    case C::kBucketIdRange:
      return absl::StrCat("bucket id ", e.a, " at element ", e.b, " (quantiles ", e.c, ")");
    case C::kKAboveN:
      return absl::StrCat("k = ", e.a, " > n = ", e.b);
    case C::kWrongK:
      return absl::StrCat("k = ", e.a, ", expected ", e.b);
    case C::kRandomkHeader:
      return absl::StrCat("header says n = ", e.a, ", k = ", e.b, "; expected n = ", e.c,
                          ", k = ", e.d);
    case C::kUnknownIndexEncoding:
      return absl::StrCat("unknown index encoding ", e.a);
    case C::kRawSectionSize:
      return absl::StrCat("raw index section of ", e.a, " bytes for ", e.b, " indices");
    case C::kIndicesNotIncreasing:
      return absl::StrCat("indices not strictly increasing below ", e.a);
    case C::kIndexWidth:
      return absl::StrCat("index width ", e.a, " > 32");
    case C::kBitPackSectionSize:
      return absl::StrCat("bit-packed index section of ", e.a, " bytes for ", e.b, " indices of ",
                          e.c, " bits");
    case C::kIndexOutOfRange:
      return absl::StrCat("index ", e.a, " >= ", e.b);
    case C::kVarintEndsEarly:
      return "varint index section ends early";
    case C::kVarintTooLong:
      return "varint index longer than 5 bytes";
    case C::kVarintTrailingBytes:
      return absl::StrCat(e.a, " bytes left after ", e.b, " varint indices");
    case C::kSignedKAboveN:
      return absl::StrCat("k_pos + k_neg = ", e.a, " > n = ", e.b);
    case C::kMeansNotFinite:
      return "means are NaN or Inf";
    case C::kIndexBothSigns:
      return absl::StrCat("index ", e.a, " is both positive and negative");
    case C::kBlockSize:
      return absl::StrCat("block size ", e.a, ", expected ", e.b);
    case C::kBlocksCarried:
      return absl::StrCat(e.a, " blocks carried, the tensor has ", e.b);
    case C::kBlockPositions:
      return absl::StrCat("positions ", e.a, " (0 index list or 1 bitmap expected)");
    case C::kBlockPositionsNotSmaller:
      return absl::StrCat("positions as ", e.a == 0 ? "an index list" : "a bitmap", " for ", e.b,
                          " of ", e.c, " blocks, where the ",
                          e.a == 0 ? "bitmap is smaller" : "index list is no larger");
    case C::kBlockSparseSize:
      return absl::StrCat(e.a, " bytes for ", e.b, " blocks (expected ", e.c, ", or ", e.d,
                          " with the short last block)");
    case C::kBitmapPadding:
      return absl::StrCat("bitmap bits from block ", e.a, " on are not zero");
    case C::kBitmapCount:
      return absl::StrCat("bitmap marks ", e.a, " blocks, the header says ", e.b);
    case C::kWrongStage:
      return absl::StrCat("stage ", e.a, " payload, expected stage ", e.b);
    case C::kCandidateFields:
      return absl::StrCat("candidate flag ", e.a, ", index encoding ", e.b, ", width ", e.c,
                          ", index_bytes ", e.d,
                          " (the flag is 0 or 1; without a candidate "
                          "the index fields are 0)");
    case C::kSinglePayloadStage:
      return absl::StrCat("stage ", e.a,
                          " in a single payload (expected 0; stage 1 and 2 payloads are summed, "
                          "not decoded)");
    case C::kFactorsNotFinite:
      return "non-finite factor values";
    case C::kFactorProductOverflow:
      return "the factors' product overflows the float range";
  }
  return absl::StrCat("format error ", static_cast<uint32_t>(e.code));
}

absl::Status FormatErrorStatus(absl::string_view codec, const FormatError& error) {
  if (error.ok()) return absl::OkStatus();
  return MalformedError(codec, FormatErrorText(error));
}

}  // namespace bytecomp::compress
