#include "client/table_cache.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "lib/hash.h"
#include "proto/convert.h"

namespace aside::client_internal {

namespace {

constexpr absl::string_view kMagic = "aside-table-cache";
// A group name fits a file name (NAME_MAX 255) with the suffix and the
// temporary file's suffix up to this length; a longer one is cut and
// suffixed with its hash.
constexpr size_t kMaxPlainName = 200;

absl::Status Refused(absl::string_view why) {
  return absl::FailedPreconditionError(why);
}

absl::Status Errno(absl::string_view what, const std::string& path, int err) {
  return absl::Status(absl::ErrnoToStatusCode(err),
                      absl::StrCat(what, " ", path, ": ", std::strerror(err)));
}

// Closes a descriptor on every path out.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd_ >= 0) {
      close(fd_);
    }
  }
  int get() const { return fd_; }
  // Closes now, reporting the error (a write error may surface only here).
  int Close() {
    const int rc = close(fd_);
    fd_ = -1;
    return rc;
  }

 private:
  int fd_;
};

// Creates `dir` and its missing parents with mode 0700.
absl::Status MakeDirectories(const std::string& dir) {
  if (dir.empty()) {
    return absl::OkStatus();
  }
  struct stat st;
  if (stat(dir.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, ": not a directory"));
    }
    return absl::OkStatus();
  }
  const size_t slash = dir.find_last_of('/');
  if (slash != std::string::npos && slash > 0) {
    if (absl::Status s = MakeDirectories(dir.substr(0, slash)); !s.ok()) {
      return s;
    }
  }
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return Errno("cannot create directory", dir, errno);
  }
  return absl::OkStatus();
}

absl::Status WriteAll(int fd, absl::string_view data, const std::string& path) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Errno("cannot write", path, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

std::string Hex32(uint32_t v) {
  return absl::StrCat(absl::Hex(v, absl::kZeroPad8));
}

}  // namespace

std::string CacheFilePath(absl::string_view dir, absl::string_view group) {
  std::string name;
  if (group.size() <= kMaxPlainName) {
    name = std::string(group);
  } else {
    name = absl::StrCat(group.substr(0, kMaxPlainName - 17), "-",
                        absl::Hex(Hash64(group, 0), absl::kZeroPad16));
  }
  std::string path(dir);
  if (!path.empty() && path.back() != '/') {
    path.push_back('/');
  }
  return absl::StrCat(path, name, ".table");
}

std::string EncodeCacheFile(const CacheRecord& record) {
  const v1::GroupUpdate& u = record.update;
  const std::string payload = u.SerializeAsString();
  std::string out = absl::StrCat(kMagic, " ", kCacheFormatVersion, "\n");
  absl::StrAppend(&out, "group ", absl::CEscape(u.group()), "\n");
  absl::StrAppend(&out, "generation ", u.generation(), "\n");
  absl::StrAppend(&out, "server_id ", absl::CEscape(u.server_id()), "\n");
  for (const std::string& target : record.targets) {
    absl::StrAppend(&out, "target ", absl::CEscape(target), "\n");
  }
  absl::StrAppend(&out, "written_unix_ms ", absl::ToUnixMillis(record.written),
                  "\n");
  absl::StrAppend(&out, "payload_bytes ", payload.size(), "\n");
  const uint32_t crc = Crc32Update(Crc32(out), payload);
  absl::StrAppend(&out, "crc32 ", Hex32(crc), "\n\n");
  out += payload;
  return out;
}

absl::StatusOr<CachedTable> DecodeCacheFile(absl::string_view bytes,
                                            const CacheExpectation& expect) {
  // Format and version first: anything else is not ours to read further.
  const size_t first_end = bytes.find('\n');
  absl::string_view version = bytes.substr(0, first_end);
  if (!absl::ConsumePrefix(&version, kMagic) ||
      !absl::ConsumePrefix(&version, " ")) {
    return Refused("not an aside table cache file");
  }
  if (first_end == absl::string_view::npos) {
    return Refused("truncated in the header");
  }
  if (version != absl::StrCat(kCacheFormatVersion)) {
    return Refused(absl::StrCat("format version '", absl::CEscape(version),
                                "'; this build reads version ",
                                kCacheFormatVersion));
  }
  const size_t header_end = bytes.find("\n\n");
  if (header_end == absl::string_view::npos) {
    return Refused("truncated in the header");
  }
  const absl::string_view header = bytes.substr(0, header_end + 1);
  const absl::string_view payload = bytes.substr(header_end + 2);

  std::string group;
  std::string server_id;
  std::vector<std::string> targets;
  uint64_t generation = 0;
  int64_t written_ms = 0;
  uint64_t payload_bytes = 0;
  uint32_t crc = 0;
  size_t crc_line = absl::string_view::npos;
  bool have_group = false, have_generation = false, have_server = false,
       have_written = false, have_size = false;
  size_t pos = first_end + 1;
  while (pos < header.size()) {
    const size_t end = header.find('\n', pos);
    const absl::string_view line = header.substr(pos, end - pos);
    const size_t line_start = pos;
    pos = end + 1;
    if (crc_line != absl::string_view::npos) {
      return Refused("header line after the checksum");
    }
    const size_t space = line.find(' ');
    const absl::string_view key = line.substr(0, space);
    const absl::string_view raw =
        space == absl::string_view::npos ? "" : line.substr(space + 1);
    std::string value;
    if (!absl::CUnescape(raw, &value)) {
      return Refused(
          absl::StrCat("header '", absl::CEscape(key), "': bad escape"));
    }
    bool ok = true;
    if (key == "group") {
      group = std::move(value);
      have_group = true;
    } else if (key == "generation") {
      ok = have_generation = absl::SimpleAtoi(value, &generation);
    } else if (key == "server_id") {
      server_id = std::move(value);
      have_server = true;
    } else if (key == "target") {
      targets.push_back(std::move(value));
    } else if (key == "written_unix_ms") {
      ok = have_written = absl::SimpleAtoi(value, &written_ms);
    } else if (key == "payload_bytes") {
      ok = have_size = absl::SimpleAtoi(value, &payload_bytes);
    } else if (key == "crc32") {
      // Only the canonical spelling: this line is the one the checksum
      // does not cover.
      ok = absl::SimpleHexAtoi(value, &crc) && value == Hex32(crc);
      crc_line = line_start;
    }
    // Other keys are covered by the checksum and otherwise ignored.
    if (!ok) {
      return Refused(absl::StrCat("header '", absl::CEscape(key),
                                  "': bad value '", raw, "'"));
    }
  }
  if (crc_line == absl::string_view::npos) {
    return Refused("no checksum in the header");
  }
  if (!have_group || !have_generation || !have_server || !have_written ||
      !have_size) {
    return Refused("header incomplete");
  }
  if (payload.size() < payload_bytes) {
    return Refused(absl::StrCat("truncated: ", payload.size(), " of ",
                                payload_bytes, " payload bytes"));
  }
  if (payload.size() > payload_bytes) {
    return Refused(absl::StrCat(payload.size() - payload_bytes,
                                " bytes after the payload"));
  }
  const uint32_t actual =
      Crc32Update(Crc32(bytes.substr(0, crc_line)), payload);
  if (actual != crc) {
    return Refused(absl::StrCat("checksum mismatch (crc32 ", Hex32(actual),
                                ", header says ", Hex32(crc), ")"));
  }
  // Intact: now whether it is this stub's to use.
  if (group != expect.group) {
    return Refused(
        absl::StrCat("written for group '", absl::CEscape(group), "'"));
  }
  const absl::flat_hash_set<std::string> configured(expect.targets.begin(),
                                                    expect.targets.end());
  if (std::none_of(targets.begin(), targets.end(), [&](const std::string& t) {
        return configured.contains(t);
      })) {
    return Refused(absl::StrCat("written for aside server(s) ",
                                absl::StrJoin(targets, ", "),
                                ", none of which is configured"));
  }
  const absl::Time written = absl::FromUnixMillis(written_ms);
  const absl::Duration age =
      std::max(expect.now - written, absl::ZeroDuration());
  if (age > expect.max_age) {
    return Refused(absl::StrCat(
        "written ", absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))),
        " ago, older than cache_max_age ",
        absl::FormatDuration(expect.max_age)));
  }
  CachedTable out;
  out.age = age;
  out.record.targets = std::move(targets);
  out.record.written = written;
  v1::GroupUpdate& u = out.record.update;
  if (!u.ParseFromArray(payload.data(), static_cast<int>(payload.size()))) {
    return Refused("payload is not a GroupUpdate");
  }
  if (u.group() != group || u.generation() != generation ||
      u.server_id() != server_id || !u.has_full()) {
    return Refused("payload does not match the header");
  }
  absl::StatusOr<TableSpec> spec = FromProto(group, generation, u.full());
  if (!spec.ok()) {
    return Refused(absl::StrCat("table invalid: ", spec.status().message()));
  }
  spec->group = group;
  out.spec = *std::move(spec);
  return out;
}

absl::StatusOr<std::string> ReadCacheFile(const std::string& path) {
  Fd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (fd.get() < 0) {
    return Errno("cannot open", path, errno);
  }
  struct stat st;
  if (fstat(fd.get(), &st) != 0) {
    return Errno("cannot stat", path, errno);
  }
  if (!S_ISREG(st.st_mode)) {
    return Refused("not a regular file");
  }
  // Whoever can write the file decides where this service sends traffic.
  if (st.st_uid != geteuid()) {
    return Refused(
        absl::StrCat("owned by uid ", st.st_uid, ", not ", geteuid()));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return Refused(absl::StrFormat("mode %04o: writable by other users",
                                   st.st_mode & 0777));
  }
  if (static_cast<uint64_t>(st.st_size) > kMaxCacheFileBytes) {
    return Refused(
        absl::StrCat(st.st_size, " bytes, more than ", kMaxCacheFileBytes));
  }
  std::string out;
  out.resize(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = read(fd.get(), out.data() + done, out.size() - done);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      return Errno("cannot read", path, errno);
    }
    if (n == 0) {
      break;  // shrank while read: the checks below see it short
    }
    done += static_cast<size_t>(n);
  }
  out.resize(done);
  return out;
}

absl::Status WriteCacheFile(const std::string& path,
                            absl::string_view contents) {
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos
                              ? "."
                              : path.substr(0, std::max<size_t>(slash, 1));
  if (absl::Status s = MakeDirectories(dir); !s.ok()) {
    return s;
  }
  std::string temp = absl::StrCat(path, ".tmp.XXXXXX");
  Fd fd(mkostemp(temp.data(), O_CLOEXEC));
  if (fd.get() < 0) {
    return Errno("cannot create", temp, errno);
  }
  absl::Status status;
  if (fchmod(fd.get(), 0600) != 0) {
    status = Errno("cannot chmod", temp, errno);
  }
  if (status.ok()) {
    status = WriteAll(fd.get(), contents, temp);
  }
  if (status.ok() && fsync(fd.get()) != 0) {
    status = Errno("cannot fsync", temp, errno);
  }
  if (fd.Close() != 0 && status.ok()) {
    status = Errno("cannot close", temp, errno);
  }
  if (status.ok() && rename(temp.c_str(), path.c_str()) != 0) {
    status = Errno("cannot rename to", path, errno);
  }
  if (!status.ok()) {
    unlink(temp.c_str());
    return status;
  }
  // The rename is durable once the directory is.
  Fd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) {
    return Errno("cannot open directory", dir, errno);
  }
  if (fsync(dir_fd.get()) != 0) {
    return Errno("cannot fsync directory", dir, errno);
  }
  return absl::OkStatus();
}

}  // namespace aside::client_internal
