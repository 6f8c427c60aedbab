// Package signing keeps the ed25519 key a node signs session heads with
// (docs/audit.md, "Signing and exporting a session"): the private key as a
// PEM PKCS#8 file readable by its owner only (DATA/credentials/signing.key
// by default, made at first start; openssl genpkey -algorithm ed25519
// writes the same format), and its public key beside it as a PEM
// SubjectPublicKeyInfo file (signing.pub) for auditors. What a signature
// signs, and how it is checked, is events.HeadMessage and
// events.VerifyHead; this package only reads and writes key files.
package signing
