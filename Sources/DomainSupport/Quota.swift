/// A per-user quota on rows a user can grow (HealthKit items, sessions, the rewards ledger). The count
/// is stored beside the rows, so a check is one read; a user whose rows predate the stored count is
/// counted once, O(rows), when next they write.
public enum Quota {
    /// The count once `added` rows are added to `stored` (or to `recount()` when nothing is stored);
    /// nil when rows are added and that passes `limit` (0: no limit).
    public static func after<E: Error>(stored: Int64?, adding added: Int64, limit: Int64,
                                       recount: () throws(E) -> Int64) throws(E) -> Int64? {
        let before: Int64
        if let stored { before = stored } else { before = try recount() }
        let after = before + added
        if limit > 0 && added > 0 && after > limit { return nil }
        return after
    }
}
