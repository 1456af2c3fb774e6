import Foundation
import Testing
import TestSupport
@testable import Auth

/// `EmailScalars` stands in for Foundation's normalisation forms in the kernel; here Foundation is the
/// reference, over every scalar of the first three planes.
@Suite(.oneStoreOnly) struct EmailScalarsTests {
    @Test func theCompatibilityCheckAgreesWithFoundationsNFKC() {
        var disagree: [String] = []
        for value in UInt32(0x20)...0x2FFFF {
            guard let s = Unicode.Scalar(value) else { continue }
            // What normalizeEmail checks: the scalar as it stands in a lowercased NFC address.
            let text = String(s).precomposedStringWithCanonicalMapping.lowercased().precomposedStringWithCanonicalMapping
            guard text.unicodeScalars.count == 1, let scalar = text.unicodeScalars.first, scalar == s else { continue }
            let foundation = [.control, .format].contains(s.properties.generalCategory)
                || text.precomposedStringWithCompatibilityMapping != text
            let ours = EmailScalars.refused(s)
            // Ours may also refuse what NFKC casefolding removes (default-ignorable scalars), and scalars
            // of Unicode 16 and later, where Foundation's ICU data may be older than the standard library's.
            let newer = s.properties.age.map { $0.major >= 16 } ?? false
            if ours != foundation && !(ours && (s.properties.isDefaultIgnorableCodePoint || newer)) {
                disagree.append(String(value, radix: 16))
            }
        }
        #expect(disagree.isEmpty, "\(disagree.count): \(disagree.prefix(60))")
    }

    @Test func nfcIsFoundationsNFC() {
        for text in ["Jose\u{301}", "\u{1E9B}\u{323}", "한국어", "ｆｕｌｌ", "A\u{30A}ngstrom"] {
            #expect(EmailScalars.nfc(text).unicodeScalars.elementsEqual(text.precomposedStringWithCanonicalMapping.unicodeScalars))
        }
    }
}
