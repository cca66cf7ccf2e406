/// The known name a mistyped one was most likely meant to be, for "did you mean":
/// the nearest by edit distance (insertions, deletions, substitutions, and a swap of
/// neighbours counted as one), if it is near enough to be a typo rather than another word.
func nearestName(to name: String, in known: some Sequence<String>) -> String? {
    let typed = Array(name)
    var best: (name: String, distance: Int)?
    for candidate in known.sorted() {
        let distance = editDistance(typed, Array(candidate))
        if distance < (best?.distance ?? Int.max) { best = (candidate, distance) }
    }
    guard let best, best.distance > 0, best.distance <= max(1, min(3, typed.count / 3)) else { return nil }
    return best.name
}

/// Optimal string alignment distance.
func editDistance(_ a: [Character], _ b: [Character]) -> Int {
    if a.isEmpty { return b.count }
    if b.isEmpty { return a.count }
    var rows = [[Int]](repeating: [Int](repeating: 0, count: b.count + 1), count: a.count + 1)
    for i in 0...a.count { rows[i][0] = i }
    for j in 0...b.count { rows[0][j] = j }
    for i in 1...a.count {
        for j in 1...b.count {
            let cost = a[i - 1] == b[j - 1] ? 0 : 1
            rows[i][j] = min(rows[i - 1][j] + 1, rows[i][j - 1] + 1, rows[i - 1][j - 1] + cost)
            if i > 1, j > 1, a[i - 1] == b[j - 2], a[i - 2] == b[j - 1] {
                rows[i][j] = min(rows[i][j], rows[i - 2][j - 2] + 1)
            }
        }
    }
    return rows[a.count][b.count]
}
