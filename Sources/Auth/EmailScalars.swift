/// The Unicode rules an email address key follows, without Foundation: Foundation's normalisation
/// forms bring ICU, 34 MB of the binary. NFC comes from the standard library; the compatibility check
/// from the scalar property Changes_When_NFKC_Casefolded, which is also true of lowercase letters whose
/// case folding differs from themselves (ß folds to ss): those without a compatibility form are listed.
/// `EmailScalarsTests` checks every scalar against Foundation's NFKC.
enum EmailScalars {
    /// `text` in Normalization Form C.
    static func nfc(_ text: String) -> String {
        String(decoding: text._nfcCodeUnits, as: UTF8.self)
    }

    /// Whether `s`, in a lowercased NFC address, makes a look-alike: a control or format character, a
    /// character whose compatibility form differs (fullwidth letters, ligatures), or one ignored by
    /// default (which NFKC casefolding removes).
    static func refused(_ s: Unicode.Scalar) -> Bool {
        let p = s.properties
        if p.generalCategory == .control || p.generalCategory == .format { return true }
        return p.changesWhenNFKCCaseFolded && !foldsOnlyByCase(s)
    }

    /// Lowercase scalars whose case folding differs from themselves and that have no compatibility
    /// decomposition (from CaseFolding.txt's full foldings and the Cherokee small letters).
    static func foldsOnlyByCase(_ s: Unicode.Scalar) -> Bool {
        switch s.value {
        case 0x00DF, 0x0345, 0x03C2, 0x0390, 0x1C80...0x1C88, 0x03B0, 0x01F0, 0x1E96...0x1E99, 0x13F8...0x13FD, 0xAB70...0xABBF,
             0x1F50, 0x1F52, 0x1F54, 0x1F56, 0x1F80...0x1F87, 0x1F90...0x1F97, 0x1FA0...0x1FA7, 0x1FB2...0x1FB4, 0x1FB6, 0x1FB7,
             0x1FC2...0x1FC4, 0x1FC6, 0x1FC7, 0x1FD2, 0x1FD3, 0x1FD6, 0x1FD7, 0x1FE2...0x1FE4, 0x1FE6, 0x1FE7,
             0x1FF2...0x1FF4, 0x1FF6, 0x1FF7:
            return true
        default:
            return false
        }
    }
}
