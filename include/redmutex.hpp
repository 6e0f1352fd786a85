/* Header-only C++ wrapper over the C API in redmutex.h (C++17). */
#ifndef REDMUTEX_HPP
#define REDMUTEX_HPP

#include <string_view>

#include "redmutex.h"

namespace redmutex {

/** Version of the linked library, such as "0.1.0". Thread-safe; the view never dangles. */
inline std::string_view version() noexcept { return redmutex_version(); }

}  // namespace redmutex

#endif /* REDMUTEX_HPP */
