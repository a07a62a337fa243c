#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace sluice::io {

namespace {
Status os_error(const std::string& what, const std::string& path) {
    ErrorCode code = errno == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo;
    return error(code, "[io] " + what + " '" + path + "': " + std::strerror(errno));
}
}  // namespace

Expected<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return os_error("cannot open", path);
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        Status s = os_error("cannot stat", path);
        ::close(fd);
        return s;
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return error(ErrorCode::kInvalidArgument, "[io] not a regular file: '" + path + "'");
    }
    size_t size = static_cast<size_t>(st.st_size);
    const uint8_t* data = nullptr;
    if (size > 0) {
        void* p = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            Status s = os_error("cannot map", path);
            ::close(fd);
            return s;
        }
        data = static_cast<const uint8_t*>(p);
    }
    ::close(fd);  // the mapping keeps the file alive
    return std::shared_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
    if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
}

Expected<std::string> read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        struct stat st {};
        if (stat(path.c_str(), &st) != 0)
            return error(ErrorCode::kNotFound, "[io] file not found: '" + path + "'");
        return error(ErrorCode::kIo, "[io] cannot read '" + path + "'");
    }
    std::ostringstream ss;
    ss << in.rdbuf();
    if (in.bad()) return error(ErrorCode::kIo, "[io] read failed: '" + path + "'");
    return ss.str();
}

Status write_file_atomic(const std::string& path, std::string_view contents) {
    std::string tmp = path + ".tmp." + std::to_string(::getpid());
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return os_error("cannot create", tmp);
    size_t done = 0;
    while (done < contents.size()) {
        ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            Status s = os_error("cannot write", tmp);
            ::close(fd);
            ::unlink(tmp.c_str());
            return s;
        }
        done += static_cast<size_t>(n);
    }
    if (::fsync(fd) != 0 || ::close(fd) != 0) {
        Status s = os_error("cannot flush", tmp);
        ::unlink(tmp.c_str());
        return s;
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        Status s = os_error("cannot rename onto", path);
        ::unlink(tmp.c_str());
        return s;
    }
    return Status::ok();
}

}  // namespace sluice::io
