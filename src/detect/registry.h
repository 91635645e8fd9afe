// registry.h — the detectors of src/detect/rules/, listed by a file generated
// at build time from their file names (cmake/detector-registry.cmake): a
// rule's detector is found by its id, and a file there that defines no
// detector of its name fails the link.
#pragma once

#include <vector>

#include "detect/detect.h"

namespace mld::detect {
std::vector<Detector> registered_detectors();
}
