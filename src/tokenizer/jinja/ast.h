// The template's syntax tree, mirroring @huggingface/jinja's ast.ts node kinds. One Node struct
// with a kind tag and generic child slots keeps the parser and evaluator short; the table below
// says which slots each kind uses.
//
//   kind               str            num/flag         a (list)        b (list)     x / y / z
//   kProgram           -              -                body            -            -
//   kText              text           -                -               -            -
//   kComment           -              -                -               -            -
//   kIf                -              -                body            alternate    x: test
//   kFor               -              -                body            else-block   x: loop var
//   (Identifier/Tuple), y: iterable, z: filter test or null kBreak, kContinue  -              - - - - kSet -
//   -                block body      -            x: target, y: value or null (block set) kMacro name -
//   params          body         - kCallBlock         -              -                caller params   body x:
//   Call expression kFilterBlock       -              -                body            -            x: filter
//   (Identifier or Call) kIdentifier        name           -                -               -            -
//   kInt/kFloat        -              ival / fval      -               -            -
//   kString            value          -                -               -            -
//   kArray, kTuple     -              -                items           -            -
//   kObject            -              -                keys            values       -
//   kMember            -              flag: computed   -               -            x: object, y: property
//   (kSlice for slices) kSlice             -              -                -               - x/y/z:
//   start/stop/step (null = absent) kCall              -              -                args            - x:
//   callee kKwarg             name           -                -               -            x: value
//   kSpread/kKwSpread  -              -                -               -            x: argument
//   kBinary            operator       -                -               -            x: left, y: right
//   kUnary             operator       -                -               -            x: operand
//   kFilter            -              -                -               -            x: operand, y: filter
//   (Identifier or Call) kTest              test name      flag: negated    test args       -            x:
//   operand kSelect            -              -                -               -            x: value, y:
//   condition  (`a if c`, no else) kTernary           -              -                -               - x:
//   condition, y: if true, z: if false
//
// Lifetime: built once by parse(), immutable afterwards, shared by all renders (read-only, so
// concurrent renders are safe).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace sluice::jinja {

enum class NodeKind : uint8_t {
    kProgram,
    kText,
    kComment,
    kIf,
    kFor,
    kBreak,
    kContinue,
    kSet,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kIdentifier,
    kInt,
    kFloat,
    kString,
    kArray,
    kTuple,
    kObject,
    kMember,
    kSlice,
    kCall,
    kKwarg,
    kSpread,
    kKwSpread,
    kBinary,
    kUnary,
    kFilter,
    kTest,
    kSelect,
    kTernary,
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

struct Node {
    NodeKind kind;
    size_t offset = 0;  // byte offset in the original template, for error messages
    std::string str;
    int64_t ival = 0;
    double fval = 0;
    bool flag = false;
    std::vector<NodePtr> a;
    std::vector<NodePtr> b;
    NodePtr x, y, z;

    Node(NodeKind k, size_t off) : kind(k), offset(off) {}
};

}  // namespace sluice::jinja
