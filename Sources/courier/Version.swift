/// What `courier --version` prints: the version and the commit it was
/// built from. `deploy/package.sh` builds a `git archive` of a commit with
/// `commit` set to that commit's hash; a build from a working tree (`swift
/// build`) says so instead.
enum CourierVersion {
    static let number = "0.9.0"
    static let commit = "none: built from a working tree"

    static var text: String { "courier \(number) (commit \(commit))" }
}

/// How to run this program again, for the commands the banner prints: the
/// path it was started by when it has one (`swift run` starts the built
/// binary by its path, which the printed commands then run without
/// building again), else `courier`, found on the PATH.
enum ProgramName {
    static var invocation: String {
        let started = CommandLine.arguments.first ?? "courier"
        return started.contains("/") ? started : "courier"
    }
}
