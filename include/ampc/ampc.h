// ampc's public C++ API in one include: tensors and dtypes, session options, and the inference
// and training sessions (docs/runtime-api.md).
#pragma once

#include "ampc/dtype.h"
#include "ampc/float_types.h"
#include "ampc/options.h"
#include "ampc/session.h"
#include "ampc/status.h"
#include "ampc/tensor.h"
#include "ampc/version.h"
