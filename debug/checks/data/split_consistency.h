// D10 with the splits' labels (the inputs-only form is in data_checks.h).
#pragma once

#include <string>
#include <vector>

#include "debug/checks/data/data_checks.h"

namespace gradsleuth::debug {

// D10 as check_split_consistency(train_x, other_x, ...), given each split's labels too (one class
// index or one float target per row; an undefined tensor leaves them out): a per-feature
// preprocessing step keeps what an example's nearest neighbour says about its label, so a split
// where it says far less than in the other carries noise or comes from another source, and the
// finding is info (D14 and L9 say more). Distances over up to opts.rank_features features, each
// standardised on its own split, on the first 600 rows of each.
std::vector<Finding> check_split_consistency(const Tensor& train_x, const Tensor& train_y, const Tensor& other_x,
                                             const Tensor& other_y, const std::string& split,
                                             const DataCheckOptions& opts = {});

}  // namespace gradsleuth::debug
