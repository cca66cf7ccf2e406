import CSystemd
#if canImport(FoundationEssentials)
import FoundationEssentials
#else
import Foundation
#endif
import Glibc

/// A D-Bus value an agent's calls carry in a variant (a{sv} hints and options).
enum BusVariant: Sendable {
    case string(String)
    case boolean(Bool)
    case byte(UInt8)
}

/// An sd-bus message, written or read on the bus thread only. sd-bus's
/// variadic helpers cannot be called from Swift: values go in and out one
/// at a time, each with its D-Bus type code.
struct BusMessage {
    let pointer: OpaquePointer

    init(_ pointer: OpaquePointer) { self.pointer = pointer }

    var member: String? { sd_bus_message_get_member(pointer).map { String(cString: $0) } }

    private static func code(_ type: Character) -> CChar { CChar(bitPattern: type.asciiValue!) }

    private func check(_ result: Int32, _ what: String) throws(BusError) {
        if result < 0 { throw BusError("cannot \(what)", code: result) }
    }

    func append(_ value: String, as type: Character = "s") throws(BusError) {
        try check(value.withCString { sd_bus_message_append_basic(pointer, Self.code(type), $0) }, "write a string")
    }

    func append(_ value: UInt32) throws(BusError) {
        var value = value
        try check(sd_bus_message_append_basic(pointer, Self.code("u"), &value), "write a number")
    }

    func append(_ value: Int32) throws(BusError) {
        var value = value
        try check(sd_bus_message_append_basic(pointer, Self.code("i"), &value), "write a number")
    }

    func append(strings: [String]) throws(BusError) {
        try container("a", "s") { () throws(BusError) in
            for string in strings { try append(string) }
        }
    }

    /// An a{sv} dictionary.
    func append(dictionary: [(String, BusVariant)]) throws(BusError) {
        try container("a", "{sv}") { () throws(BusError) in
            for (key, value) in dictionary {
                try container("e", "sv") { () throws(BusError) in
                    try append(key)
                    switch value {
                    case .string(let string):
                        try container("v", "s") { () throws(BusError) in try append(string) }
                    case .boolean(let flag):
                        var int: Int32 = flag ? 1 : 0
                        try container("v", "b") { () throws(BusError) in
                            try check(sd_bus_message_append_basic(pointer, Self.code("b"), &int), "write a boolean")
                        }
                    case .byte(let byte):
                        var byte = byte
                        try container("v", "y") { () throws(BusError) in
                            try check(sd_bus_message_append_basic(pointer, Self.code("y"), &byte), "write a byte")
                        }
                    }
                }
            }
        }
    }

    private func container(_ type: Character, _ contents: String, _ body: () throws(BusError) -> Void) throws(BusError) {
        try check(sd_bus_message_open_container(pointer, Self.code(type), contents), "open a container")
        try body()
        try check(sd_bus_message_close_container(pointer), "close a container")
    }

    func readUInt32() throws(BusError) -> UInt32 {
        var value: UInt32 = 0
        try check(sd_bus_message_read_basic(pointer, Self.code("u"), &value), "read a number")
        return value
    }

    /// A string, object path ("o") or signature ("g").
    func readString(_ type: Character) throws(BusError) -> String {
        var value: UnsafePointer<CChar>?
        try check(sd_bus_message_read_basic(pointer, Self.code(type), &value), "read a string")
        return value.map { String(cString: $0) } ?? ""
    }

    /// One method call and its reply. `timeout` in microseconds (0: sd-bus's 25 s).
    /// An error reply throws with its D-Bus name, so callers can tell "no one
    /// owns that name" from a refusal.
    static func call<T>(
        _ bus: OpaquePointer, destination: String, path: String, interface: String, member: String, timeout: UInt64 = 0,
        append: (BusMessage) throws(BusError) -> Void, read: (BusMessage) throws(BusError) -> T
    ) throws(BusError) -> T {
        var made: OpaquePointer?
        let created = sd_bus_message_new_method_call(bus, &made, destination, path, interface, member)
        guard created >= 0, let message = made else { throw BusError("cannot make a call to \(destination)", code: created) }
        defer { sd_bus_message_unref(message) }
        try append(BusMessage(message))
        var error = sd_bus_error()
        defer { sd_bus_error_free(&error) }
        var answer: OpaquePointer?
        let called = sd_bus_call(bus, message, timeout, &error, &answer)
        guard called >= 0, let reply = answer else {
            let name = error.name.map { String(cString: $0) }
            let text = error.message.map { String(cString: $0) } ?? String(cString: strerror(-called))
            throw BusError(name: name, "\(destination) \(member): \(text)")
        }
        defer { sd_bus_message_unref(reply) }
        return try read(BusMessage(reply))
    }
}
