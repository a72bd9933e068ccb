// The door of common/: what every process shares.
#pragma once

#include "bytecomp/common/config.h"
#include "bytecomp/common/declaration_limits.h"
#include "bytecomp/common/dtype.h"
#include "bytecomp/common/half.h"
#include "bytecomp/common/link_probe.h"
#include "bytecomp/common/logging.h"
#include "bytecomp/common/net.h"
#include "bytecomp/common/node_token.h"
#include "bytecomp/common/partition.h"
#include "bytecomp/common/refusal_log.h"
#include "bytecomp/common/scheduler_client.h"
#include "bytecomp/common/socket_limits.h"
#include "bytecomp/common/stats.h"
#include "bytecomp/common/transport.h"
