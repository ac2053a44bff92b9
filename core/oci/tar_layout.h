// The ustar header block's fields (POSIX.1-1988 and pax; GNU tar's magic), where the tar writer
// (tar.cc) puts them and the follower (tar_follower.cc) reads them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace modelfs::tar_layout {

inline constexpr size_t kNameOff = 0, kNameLen = 100;
inline constexpr size_t kModeOff = 100, kModeLen = 8;
inline constexpr size_t kUidOff = 108, kGidOff = 116, kIdLen = 8;
inline constexpr size_t kSizeOff = 124, kSizeLen = 12;
inline constexpr size_t kMtimeOff = 136, kMtimeLen = 12;
inline constexpr size_t kChksumOff = 148, kChksumLen = 8;
inline constexpr size_t kTypeOff = 156;
inline constexpr size_t kLinkOff = 157, kLinkLen = 100;
inline constexpr size_t kMagicOff = 257;
inline constexpr size_t kDevMajorOff = 329, kDevMinorOff = 337, kDevLen = 8;
inline constexpr size_t kPrefixOff = 345, kPrefixLen = 155;
inline constexpr std::string_view kUstarMagic(
    "ustar\0"
    "00",
    8);
inline constexpr std::string_view kGnuMagic("ustar  \0", 8);

}  // namespace modelfs::tar_layout
