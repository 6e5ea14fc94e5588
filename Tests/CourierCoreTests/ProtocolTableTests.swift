import CourierCore
import Foundation
import Testing

/// Reads the tables of docs/protocol.md so that the document and the code
/// cannot drift apart.
enum ProtocolDocument {
    static let text: String = {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (try? String(contentsOf: root.appendingPathComponent("docs/protocol.md"), encoding: .utf8)) ?? ""
    }()

    /// The table rows (cells trimmed) of the section whose heading starts with `heading`.
    static func rows(under heading: String) -> [[String]] {
        var inSection = false
        var rows: [[String]] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            // A section's first table ends at its first sub-heading.
            if line.hasPrefix("#") { inSection = line.hasPrefix("## " + heading) }
            guard inSection, line.hasPrefix("|"), !line.contains("---") else { continue }
            rows.append(line.split(separator: "|").map { $0.trimmingCharacters(in: .whitespaces) })
        }
        return Array(rows.dropFirst())  // the header row
    }
}

@Suite struct ProtocolTableTests {
    @Test func everyReasonOfTable86IsDocumentedWithItsStatus() throws {
        let rows = ProtocolDocument.rows(under: "2. HTTP/2").filter { $0[1] != "—" }
        #expect(rows.count == Reason.Known.allCases.count)
        var documented = Set<String>()
        for row in rows {
            let status = try #require(Int(row[0]))
            let reason = Reason(rawValue: row[1])
            #expect(reason.known != nil, "\(row[1]) is not a known reason")
            #expect(reason.httpStatus == status, "\(row[1]) should be \(status)")
            documented.insert(row[1])
        }
        #expect(documented == Set(Reason.Known.allCases.map(\.rawValue)))
    }

    @Test func unknownReasonsAreKeptVerbatim() {
        let reason = Reason(rawValue: "SomethingNew")
        #expect(reason.known == nil)
        #expect(reason.rawValue == "SomethingNew")
        #expect(reason.httpStatus == 400)
        #expect(Reason.unknown("SomethingNew") == reason)
        #expect(Reason(rawValue: "Unregistered") == .unregistered)
    }

    @Test func binaryStatusTableCoversAll256Values() throws {
        let rows = ProtocolDocument.rows(under: "1. Binary")
        var covered = Set<Int>()
        for row in rows {
            let cell = row[0]
            if let range = cell.split(separator: "–").map({ Int($0) }) as [Int?]?, range.count == 2, let low = range[0], let high = range[1] {
                for value in low...high {
                    covered.insert(value)
                    #expect(BinaryStatus(rawValue: UInt8(value)).meaning.hasPrefix("Unassigned"), "\(value)")
                }
            } else {
                let value = try #require(Int(cell))
                covered.insert(value)
                let meaning = BinaryStatus(rawValue: UInt8(value)).meaning
                if row[1] == "— (unassigned)" {
                    #expect(meaning.hasPrefix("Unassigned"))
                } else {
                    #expect(meaning == row[1], "status \(value)")
                }
            }
        }
        #expect(covered == Set(0...255))
    }

    @Test func namedStatusesHaveTheGuidesValues() {
        #expect(BinaryStatus.processingError.rawValue == 1)
        #expect(BinaryStatus.missingDeviceToken.rawValue == 2)
        #expect(BinaryStatus.missingTopic.rawValue == 3)
        #expect(BinaryStatus.missingPayload.rawValue == 4)
        #expect(BinaryStatus.invalidTokenSize.rawValue == 5)
        #expect(BinaryStatus.invalidTopicSize.rawValue == 6)
        #expect(BinaryStatus.invalidPayloadSize.rawValue == 7)
        #expect(BinaryStatus.invalidToken.rawValue == 8)
        #expect(BinaryStatus.shutdown.rawValue == 10)
        #expect(BinaryStatus.protocolError.rawValue == 128)
        #expect(BinaryStatus.unknown.rawValue == 255)
    }

    /// §3: each payload failure's documented binary status and HTTP/2 answer.
    @Test func payloadRuleMappingMatchesTheDocument() throws {
        let rows = ProtocolDocument.rows(under: "3. Payload")
        let expected: [(String, PayloadError?)] = [
            ("priority given and neither", .unknownPriority),
            ("payload empty", .empty),
            ("payload over the channel", .tooLarge),
            ("payload ends in a NUL", .nullTerminated),
            ("payload is not a JSON object", .notJSONObject),
            ("priority 10 given explicitly", .priorityTenSilent),
            ("anything else", nil),
        ]
        #expect(rows.count == expected.count)
        for (row, (prefix, error)) in zip(rows, expected) {
            #expect(row[0].hasPrefix(prefix), "row order: \(row[0])")
            guard let error else {
                #expect(row[1] == "accepted" && row[2] == "200")
                continue
            }
            #expect(row[1] == String(error.binaryStatus.rawValue), "\(error) binary")
            #expect(row[2] == "\(error.reason.httpStatus) \(error.reason.rawValue)", "\(error) HTTP/2")
        }
    }
}
