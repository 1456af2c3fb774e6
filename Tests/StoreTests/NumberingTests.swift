import DiskModel
import Foundation
import Storage
@testable import Store
import Testing
import TestSupport
import Threads

/// Feed positions are never given twice, though a power cut under `everysec` takes records whose
/// positions hosts saw. Found by the simulation (seeds 3, 4, 12 and 12 more of the first 300, once
/// seeds ran `everysec`): after a power cut, new changes took the lost ones' positions, and a user's
/// events went back in `seq` (a host's cursor past them would have skipped the new changes).
@Suite(.oneStoreOnly) struct NumberingTests {
    static func open(_ dir: String, _ model: CrashModel, fsync: FsyncMode) throws -> (Store, Table<Note>) {
        try RecoveredDurabilityTests.open(dir, model, fsync: fsync)
    }

    /// Commits a note and flushes it (answered); returns the record it took.
    static func put(_ store: Store, _ notes: Table<Note>, _ key: String) throws -> UInt64 {
        var tx = Transaction()
        tx.put(notes, user: "u1", key: key, Note(key))
        try store.commit(tx)
        #expect(store.flush().fatal == false)
        return store.lastRecord
    }

    /// The power fails now: the data dir as the device holds it, in a new folder.
    static func afterPowerCut(_ model: CrashModel) throws -> String {
        let image = temporaryDirectory("numbering-image")
        try model.image(into: image, keep: 0)
        return image
    }

    @Test func aStartAfterAPowerCutUnderEverysecNumbersPastWhatWasLost() throws {
        let dir = temporaryDirectory("numbering")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let model = CrashModel(dir: dir)
        let (store, notes) = try Self.open(dir, model, fsync: .everysec)
        let lost = try Self.put(store, notes, "a")  // answered, never synced
        store.abandon()
        let image = try Self.afterPowerCut(model)
        defer { try? FileManager.default.removeItem(atPath: image) }
        let (after, notesAfter) = try Self.open(image, CrashModel(dir: image), fsync: .everysec)
        #expect(try notesAfter.get(user: "u1", key: "a") == nil, "the power cut took it")
        let next = try Self.put(after, notesAfter, "b")
        #expect(next >= lost + NumberingMarker.jump, "numbered past every record the cut may have taken")
        after.abandon()
        // The jump was durable before anything was answered: a second cut does not undo it.
        let (again, notesAgain) = try Self.open(image, CrashModel(dir: image), fsync: .everysec)
        defer { again.abandon() }
        #expect(try notesAgain.get(user: "u1", key: "b") != nil, "a crash keeps the page cache")
        #expect(try Self.put(again, notesAgain, "c") >= next + NumberingMarker.jump)
    }

    @Test func aCleanStopNumbersOnWithoutAJump() throws {
        let dir = temporaryDirectory("numbering-clean")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var (store, notes) = try Self.open(dir, CrashModel(dir: dir), fsync: .everysec)
        let first = try Self.put(store, notes, "a")
        store.shutdown()
        (store, notes) = try Self.open(dir, CrashModel(dir: dir), fsync: .everysec)
        defer { store.abandon() }
        #expect(try notes.get(user: "u1", key: "a") != nil)
        #expect(try Self.put(store, notes, "b") == first + 2, "the stop's marker took one number")
    }

    @Test func underAlwaysNothingAnsweredIsLostSoNumbersGoOn() throws {
        let dir = temporaryDirectory("numbering-always")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var (store, notes) = try Self.open(dir, CrashModel(dir: dir), fsync: .always)
        let first = try Self.put(store, notes, "a")
        store.abandon()
        (store, notes) = try Self.open(dir, CrashModel(dir: dir), fsync: .always)
        defer { store.abandon() }
        #expect(try Self.put(store, notes, "b") == first + 1)
    }

    @Test func markersAreToldApartFromChangeRecords() {
        for marker in [NumberingMarker.stopped, .jumped(next: 1 << 40 | 7)] {
            #expect(NumberingMarker(payload: ArraySlice(marker.payload), format: .stamped) == marker)
            #expect(NumberingMarker(payload: ArraySlice(marker.payload), format: .binary) == nil, "older formats have no markers")
        }
        // A change record starts with its commit time, a varint that is never 0.
        #expect(NumberingMarker(payload: [0x80, 0x01, 0, 0, 0, 0, 0, 0, 0], format: .stamped) == nil)
    }
}
