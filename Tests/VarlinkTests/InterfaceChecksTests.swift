import Testing
import Varlink

/// Calls checked against the declaration, each refusal naming its parameter.
@Suite struct InterfaceChecksTests {
    let interface = try! VarlinkInterface(description: """
        interface org.example.checks
        type Item (name: string, count: ?int)
        type Tree (label: string, children: []Tree)
        method Call(
          text: string, number: int, ratio: float, flag: bool, extra: object,
          item: Item, items: []Item, labels: [string]int, set: [string](), mode: (fast, safe),
          maybe: ?string, tree: ?Tree
        ) -> (done: bool)
        """)

    let valid: JSONObject = [
        "text": "t", "number": 3, "ratio": 0.5, "flag": true, "extra": ["any": [1, "x"]],
        "item": ["name": "n"], "items": [["name": "a", "count": 1], ["name": "b", "count": nil]],
        "labels": ["a": 1], "set": ["x": [:]], "mode": "safe",
    ]

    func invalid(_ change: (inout JSONObject) -> Void) -> String? {
        var parameters = valid
        change(&parameters)
        return interface.invalidParameter(parameters, method: "Call")
    }

    @Test func acceptsAValidCall() {
        #expect(interface.invalidParameter(valid, method: "Call") == nil)
        // A whole number sent as 2.0 is an int; an int is a float.
        #expect(invalid { $0["number"] = 2.0; $0["ratio"] = 1 } == nil)
        #expect(invalid { $0["maybe"] = nil; $0["tree"] = ["label": "r", "children": [["label": "c", "children": []]]] } == nil)
    }

    @Test func aMissingRequiredParameterIsNamed() {
        #expect(invalid { $0["text"] = nil } == "text")
        #expect(invalid { $0["number"] = .null } == "number")
        #expect(invalid { $0["maybe"] = .null } == nil)
    }

    @Test func anUndeclaredParameterIsNamedUnlessItIsNull() {
        #expect(invalid { $0["txet"] = "typo" } == "txet")
        #expect(invalid { $0["future"] = .null } == nil)
    }

    @Test(arguments: [
        ("text", 5), ("number", "5"), ("number", 2.5), ("number", true), ("ratio", "0.5"),
        ("flag", 1), ("extra", "x"), ("extra", [1]), ("mode", "slow"), ("mode", 1), ("maybe", 7),
    ] as [(String, JSONValue)])
    func aValueOfTheWrongTypeIsNamed(name: String, value: JSONValue) {
        #expect(invalid { $0[name] = value } == name)
    }

    @Test func nestedValuesNameTheirParameter() {
        #expect(invalid { $0["item"] = ["name": 1] } == "item")
        #expect(invalid { $0["item"] = ["count": 1] } == "item")
        #expect(invalid { $0["item"] = ["name": "n", "colour": "red"] } == "item")
        #expect(invalid { $0["items"] = [["name": "a"], "b"] } == "items")
        #expect(invalid { $0["items"] = ["name": "a"] } == "items")
        #expect(invalid { $0["labels"] = ["a": "1"] } == "labels")
        #expect(invalid { $0["labels"] = [1] } == "labels")
        #expect(invalid { $0["set"] = ["x": ["y": 1]] } == "set")
        #expect(invalid { $0["tree"] = ["label": "r", "children": [["label": 1, "children": []]]] } == "tree")
    }

    @Test func repliesAreCheckedTheSameWay() {
        #expect(interface.invalidReplyParameter(["done": true], method: "Call") == nil)
        #expect(interface.invalidReplyParameter(["done": "yes"], method: "Call") == "done")
        #expect(interface.invalidReplyParameter([:], method: "Nope") == nil)
    }
}
