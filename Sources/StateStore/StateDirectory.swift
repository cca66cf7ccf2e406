#if canImport(Glibc)
import Glibc
#endif

/// The state directory's checks, as OpenSSH's StrictModes: every directory
/// above it belongs to root or tokend's user and no one else may write it
/// (unless sticky, as /tmp), so no one else can rename it away and put their
/// own in its place while tokend runs. A symbolic link on the way is
/// followed only when root or tokend's user owns it (its directory already
/// passed, so no one else can replace it): ostree's `/home -> var/home` and
/// a user's link to another disk work, another user's link is refused. The
/// directory itself is then opened without following a link, and checked
/// and tightened through that descriptor, not by path.
enum StateDirectory {
    /// Creates `path` if needed, checks it and its parents, sets it to 0700.
    static func open(_ path: String) throws -> String {
        let me = geteuid()
        var parent = path
        while parent.count > 1, parent.hasSuffix("/") { parent.removeLast() }
        let name = parent.split(separator: "/").last.map(String.init) ?? parent
        parent = String(parent.dropLast(name.count))
        if parent.isEmpty { parent = "." }
        let real = try resolve(parent, me: me)
        if mkdir(path, 0o700) != 0, errno != EEXIST {
            throw AtomicFile.WriteError(step: "mkdir", path: path, errno: errno)
        }
        var target = real == "/" ? "/" + name : real + "/" + name
        var info = stat()
        if lstat(target, &info) == 0, info.st_mode & S_IFMT == S_IFLNK {
            try trust(link: target, info, me: me)
            target = try resolve(target, me: me)
        }
        let fd = Glibc.open(target, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else { throw AtomicFile.WriteError(step: "open", path: path, errno: errno) }
        defer { close(fd) }
        guard fstat(fd, &info) == 0 else { throw AtomicFile.WriteError(step: "fstat", path: path, errno: errno) }
        try Ownership.check(info, path: path, fixMode: "0700")
        guard fchmod(fd, 0o700) == 0 else { throw AtomicFile.WriteError(step: "chmod", path: path, errno: errno) }
        return target
    }

    /// The real path of the directory `path`, every component checked: owned
    /// by root or `me`, not writable by group or others unless sticky; links
    /// owned by root or `me` followed (at most 40, as the kernel).
    static func resolve(_ path: String, me: uid_t) throws(UnsafeOwnershipError) -> String {
        var pending: [Substring] = path.split(separator: "/").reversed()
        var current = "/"
        if !path.hasPrefix("/") {
            guard let cwd = getcwd(nil, 0) else {
                throw UnsafeOwnershipError(path: path, problem: "cannot be resolved", fix: "use an absolute path")
            }
            defer { free(cwd) }
            pending += String(cString: cwd).split(separator: "/").reversed()
        }
        try checkParent("/", me: me)
        var links = 0
        while let name = pending.popLast() {
            if name == "." { continue }
            if name == ".." {
                current = current == "/" ? "/" : String(current[..<(current.lastIndex(of: "/") ?? current.startIndex)])
                if current.isEmpty { current = "/" }
                continue
            }
            let candidate = current == "/" ? "/" + name : current + "/" + name
            var info = stat()
            guard lstat(candidate, &info) == 0 else {
                throw UnsafeOwnershipError(
                    path: candidate, problem: "cannot be examined (\(String(cString: strerror(errno))))",
                    fix: "create it, owned by root or tokend's user")
            }
            if info.st_mode & S_IFMT == S_IFLNK {
                links += 1
                try trust(link: candidate, info, me: me)
                guard links <= 40, let target = readLink(candidate) else {
                    throw UnsafeOwnershipError(
                        path: candidate, problem: "is a link that cannot be followed", fix: "name the real path")
                }
                if target.hasPrefix("/") { current = "/" }
                pending += target.split(separator: "/").reversed()
                continue
            }
            try checkParent(candidate, info, me: me)
            current = candidate
        }
        return current
    }

    static func checkParent(_ path: String, me: uid_t) throws(UnsafeOwnershipError) {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            throw UnsafeOwnershipError(path: path, problem: "cannot be examined", fix: "check the path")
        }
        try checkParent(path, info, me: me)
    }

    static func checkParent(_ path: String, _ info: stat, me: uid_t) throws(UnsafeOwnershipError) {
        if info.st_uid != 0 && info.st_uid != me {
            throw UnsafeOwnershipError(
                path: path,
                problem: "is owned by uid \(info.st_uid), neither root nor tokend's user (uid \(me)): "
                    + "its owner can replace the state directory",
                fix: "chown root: \(path), or use a state directory under directories root or tokend's user owns")
        }
        if info.st_mode & 0o022 != 0 && info.st_mode & S_ISVTX == 0 {
            throw UnsafeOwnershipError(
                path: path,
                problem: "is writable by its group or by other users and not sticky "
                    + "(mode 0\(String(info.st_mode & 0o7777, radix: 8))): they can rename the state directory "
                    + "away and put their own in its place",
                fix: "chmod go-w \(path) (or chmod +t \(path)), or use a state directory elsewhere")
        }
    }

    /// A link another user owns can be pointed anywhere by its owner.
    static func trust(link path: String, _ info: stat, me: uid_t) throws(UnsafeOwnershipError) {
        guard info.st_uid == 0 || info.st_uid == me else {
            throw UnsafeOwnershipError(
                path: path,
                problem: "is a symbolic link owned by uid \(info.st_uid): its owner can point it elsewhere",
                fix: "name the directory itself in state-directory, not a link another user owns")
        }
    }

    static func readLink(_ path: String) -> String? {
        var buffer = [CChar](repeating: 0, count: Int(PATH_MAX) + 1)
        let count = readlink(path, &buffer, Int(PATH_MAX))
        guard count > 0 else { return nil }
        return String(decoding: buffer[..<count].map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}
