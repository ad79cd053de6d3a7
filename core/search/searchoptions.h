#pragma once

#include "cost/costoptions.h"

#include <cstddef>
#include <functional>

namespace tapestry::search {

// Knobs shared by the searches.
struct SearchOptions {
    cost::CostOptions cost;
    // tap: search each class block by block, linked by the layout of the
    // residual stream between blocks, keeping only the plans no other beats
    // in time, communication and memory together. false: enumerate every
    // combination of a class' weights and link layouts and cost the class
    // as a whole each time -- the exhaustive answer the tests hold tap to.
    bool decompose = true;
    // exact: the solver's wall-clock limit.
    double timeLimitSeconds = 60;
    // Called now and then with work done and work planned (units of the
    // search's choosing), from the searching thread.
    std::function<void(std::size_t done, std::size_t total)> progress;
};

} // namespace tapestry::search
