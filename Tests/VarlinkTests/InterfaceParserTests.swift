import Testing
import Varlink

/// The interface definition language (varlink.org, "Interface Definition"):
/// every construct read into the model, and malformed declarations refused
/// with the line and column of the fault.
@Suite struct InterfaceParserTests {
    @Test func readsEveryConstruct() throws {
        let interface = try VarlinkInterface(description: """
            # The interface's comment.
            interface org.example.all-types

            # A struct type, with comments between its members.
            type Item (
              # the name
              name: string,
              count: ?int,
              ratio: float,
              on: bool,
              extra: object
            )

            type Color (red, green, blue)

            method Put(item: Item, tags: []string, labels: [string]string, set: [string](),
                       maybe: ?[]?Item, mode: (fast, safe), inline: (a: int, b: ?(x: bool))) -> ()
            method Get(name: string) -> (item: ?Item, colors: [][string]Color)
            error Missing (name: string)
            error Busy ()
            """)
        #expect(interface.name == "org.example.all-types")
        #expect(interface.types["Item"] == .structure([
            VarlinkField(name: "name", type: .string), VarlinkField(name: "count", type: .nullable(.int)),
            VarlinkField(name: "ratio", type: .float), VarlinkField(name: "on", type: .bool),
            VarlinkField(name: "extra", type: .object),
        ]))
        #expect(interface.types["Color"] == .enumeration(["red", "green", "blue"]))
        let put = try #require(interface.methods["Put"])
        #expect(put.input.map(\.type) == [
            .named("Item"), .array(.string), .map(.string), .map(.structure([])),
            .nullable(.array(.nullable(.named("Item")))), .enumeration(["fast", "safe"]),
            .structure([VarlinkField(name: "a", type: .int), VarlinkField(name: "b", type: .nullable(.structure([VarlinkField(name: "x", type: .bool)])))]),
        ])
        #expect(put.output.isEmpty)
        #expect(interface.methods["Get"]?.output == [
            VarlinkField(name: "item", type: .nullable(.named("Item"))),
            VarlinkField(name: "colors", type: .array(.map(.named("Color")))),
        ])
        #expect(interface.errors == ["Missing": [VarlinkField(name: "name", type: .string)], "Busy": []])
        #expect(interface.methods["Get"]?.input.first?.isOptional == false)
    }

    @Test func keywordsAreNamesWhereTheGrammarWantsAName() throws {
        let interface = try VarlinkInterface(description: """
            interface org.example.k
            type Interface (interface: string, enum: (type, method), object: object, struct: (error: int))
            method M(bool: bool, Interface: ?Interface) -> (string: string)
            """)
        #expect(interface.methods["M"]?.input.map(\.name) == ["bool", "Interface"])
        #expect(interface.types["Interface"] != nil)
    }

    @Test func readsTheServiceInterface() throws {
        #expect(VarlinkInterface.service.methods.keys.sorted() == ["GetInfo", "GetInterfaceDescription"])
        #expect(VarlinkInterface.service.errors["InvalidParameter"] == [VarlinkField(name: "parameter", type: .string)])
    }

    @Test(arguments: [
        ("interfac org.example.x\nmethod M() -> ()", 1, 1, "expected \"interface\""),
        ("interface example\nmethod M() -> ()", 1, 11, "interface name"),
        ("interface Org.example\nmethod M() -> ()", 1, 11, "interface name"),
        ("interface org..example\nmethod M() -> ()", 1, 11, "interface name"),
        ("interface org.example.x", 1, 24, "expected a type, method or error"),
        ("interface org.example.x\nfunction M() -> ()", 2, 1, "expected \"type\", \"method\" or \"error\""),
        ("interface org.example.x\nmethod m() -> ()", 2, 8, "capital"),
        ("interface org.example.x\nmethod M() ()", 2, 12, "expected \"->\""),
        ("interface org.example.x\nmethod M(a: int -> ()", 2, 17, "expected \")\""),
        ("interface org.example.x\nmethod M(a int) -> ()", 2, 12, "expected \":\""),
        ("interface org.example.x\nmethod M(a: Nope) -> ()", 2, 13, "Nope is not a declared type"),
        ("interface org.example.x\nmethod M(a: ??int) -> ()", 2, 14, "after \"?\""),
        ("interface org.example.x\nmethod M(a: [int]int) -> ()", 2, 13, "string]"),
        ("interface org.example.x\nmethod M(a: int, a: int) -> ()", 2, 18, "a appears twice"),
        ("interface org.example.x\nmethod M(_a: int) -> ()", 2, 10, "member name"),
        ("interface org.example.x\ntype T (a, b, a)", 2, 15, "a appears twice"),
        ("interface org.example.x\ntype T (a, )", 2, 12, "enum value"),
        ("interface org.example.x\nmethod M() -> ()\n# comment\nerror M ()", 4, 7, "M is declared twice"),
        ("interface org.example.x\nmethod M(a: ", 2, 13, "expected a type (at the end)"),
    ])
    func refusesMalformedDeclarationsWithAPosition(text: String, line: Int, column: Int, reason: String) {
        do {
            _ = try VarlinkInterface(description: text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.line == line && error.column == column, "\(error)")
            #expect(error.reason.contains(reason), "\(error)")
        }
    }
}
