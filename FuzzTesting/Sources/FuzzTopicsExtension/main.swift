// Fuzzes the reader of the provider certificate's topics extension
// (OID 1.2.840.113635.100.6.3.6): the input is the extension's value (DER).
//
// Oracles:
// - reading never crashes (a bad value is an error);
// - topics read, written again in Apple's layout (each topic followed by a
//   SEQUENCE with its kind) or in the plain layout (UTF8Strings only), read
//   back as the same topics; and writing them is canonical (the second
//   writing of what was read back is byte for byte the first);
// - each topic read is the topic its own description names.

import CourierCore
import CourierPKI
import FuzzSupport
import SwiftASN1
import X509

func read(_ value: [UInt8]) -> [Topic]? {
    let ext = Certificate.Extension(oid: .Courier.topics, critical: false, value: value[...])
    return try? PushTopicsExtension(ext).topics
}

func check(_ bytes: UnsafeRawBufferPointer) {
    let value = Array(bytes)
    guard let topics = read(value) else { return }
    for topic in topics {
        require(Topic(topic.description) == topic, "topic \(topic) (\(topic.bundleID), \(topic.kind)) reads back as another")
    }
    let written: [Certificate.Extension]
    do {
        let ext = PushTopicsExtension(topics: topics)
        written = [try ext.makeCertificateExtension(), try ext.makePlainCertificateExtension()]
    } catch {
        violation("topics \(topics) read from \(hex(value)) cannot be written: \(error)")
    }
    for ext in written {
        guard let again = read(Array(ext.value)) else {
            violation("topics \(topics) written as \(hex(ext.value)) cannot be read back")
        }
        require(again == topics, "topics \(topics) written as \(hex(ext.value)) read back as \(again)")
        let rewritten = try! PushTopicsExtension(topics: again).makeCertificateExtension()
        require(rewritten.value == written[0].value, "writing is not canonical: \(hex(written[0].value)) then \(hex(rewritten.value))")
    }
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzTopicsExtension(_ start: UnsafeRawPointer?, _ count: Int) -> CInt {
    check(UnsafeRawBufferPointer(start: start, count: count))
    return 0
}
