// Port of @huggingface/jinja parser.ts; function names follow the original (parseIfExpression,
// parseLogicalOrExpression, ...) so the two can be read side by side. See parser.h.
#include "tokenizer/jinja/parser.h"

#include <set>
#include <string>

#include "tokenizer/jinja/error.h"

namespace sluice::jinja {
namespace {

using T = TokenType;

class Parser {
 public:
    Parser(const std::vector<Token>& tokens, size_t source_size)
        : tokens_(tokens), end_offset_(source_size) {}

    NodePtr parse_program() {
        auto program = make(NodeKind::kProgram, 0);
        while (current_ < tokens_.size()) program->a.push_back(parse_any());
        return program;
    }

 private:
    const std::vector<Token>& tokens_;
    size_t end_offset_;
    size_t current_ = 0;
    int depth_ = 0;

    struct DepthGuard {
        Parser& p;
        explicit DepthGuard(Parser& parser) : p(parser) {
            if (++p.depth_ > kMaxParseDepth) {
                p.error("template nested deeper than " + std::to_string(kMaxParseDepth) + " levels");
            }
        }
        ~DepthGuard() { --p.depth_; }
    };

    static NodePtr make(NodeKind k, size_t offset) { return std::make_unique<Node>(k, offset); }
    size_t here() const { return current_ < tokens_.size() ? tokens_[current_].offset : end_offset_; }
    [[noreturn]] void error(const std::string& message) const { fail(message, here()); }

    const Token& peek() const {
        if (current_ >= tokens_.size()) error("Unexpected end of template");
        return tokens_[current_];
    }
    const Token& next() {
        const Token& t = peek();
        ++current_;
        return t;
    }
    const Token& expect(T type, const std::string& message) {
        if (current_ >= tokens_.size()) {
            error(message + ": got end of template, expected " + token_type_name(type));
        }
        const Token& t = tokens_[current_];
        if (t.type != type) {
            error(message + ": got " + token_type_name(t.type) + " '" + t.value + "', expected " +
                  token_type_name(type));
        }
        ++current_;
        return t;
    }
    bool is(T type, size_t ahead = 0) const {
        return current_ + ahead < tokens_.size() && tokens_[current_ + ahead].type == type;
    }
    bool is_identifier(const char* name, size_t ahead = 0) const {
        return is(T::kIdentifier, ahead) && tokens_[current_ + ahead].value == name;
    }
    bool is_statement(std::initializer_list<const char*> names) const {
        if (!is(T::kOpenStatement) || !is(T::kIdentifier, 1)) return false;
        for (const char* n : names) {
            if (tokens_[current_ + 1].value == n) return true;
        }
        return false;
    }
    void expect_identifier(const char* name) {
        if (!is_identifier(name)) error(std::string("Expected '") + name + "'");
        ++current_;
    }
    void expect_end_tag(const char* name) {
        expect(T::kOpenStatement, std::string("Expected {% ") + name + " %}");
        expect_identifier(name);
        expect(T::kCloseStatement, "Expected %}");
    }
    // Parses statements until one of `names` opens the next tag.
    void parse_body_until(std::initializer_list<const char*> names, std::vector<NodePtr>& body,
                          size_t open_offset, const char* what) {
        while (!is_statement(names)) {
            if (current_ >= tokens_.size()) {
                fail(std::string("Unclosed '") + what + "' block: reached end of template", open_offset);
            }
            body.push_back(parse_any());
        }
    }

    NodePtr parse_any() {
        DepthGuard guard(*this);
        const Token& t = peek();
        switch (t.type) {
            case T::kComment: {
                ++current_;
                return make(NodeKind::kComment, t.offset);
            }
            case T::kText: {
                ++current_;
                auto n = make(NodeKind::kText, t.offset);
                n->str = t.value;
                return n;
            }
            case T::kOpenStatement: return parse_statement();
            case T::kOpenExpression: {
                ++current_;
                auto e = parse_expression();
                expect(T::kCloseExpression, "Expected closing expression token '}}'");
                return e;
            }
            default: error(std::string("Unexpected token type: ") + token_type_name(t.type));
        }
    }

    NodePtr parse_statement() {
        size_t open_offset = here();
        expect(T::kOpenStatement, "Expected opening statement token");
        if (!is(T::kIdentifier)) error(std::string("Unknown statement, got ") + token_type_name(peek().type));
        std::string name = peek().value;
        size_t name_offset = here();
        if (name == "set") {
            ++current_;
            return parse_set(open_offset);
        }
        if (name == "if") {
            ++current_;
            auto n = parse_if(open_offset);
            expect_end_tag("endif");
            return n;
        }
        if (name == "macro") {
            ++current_;
            auto n = make(NodeKind::kMacro, open_offset);
            auto callee = parse_primary();
            if (callee->kind != NodeKind::kIdentifier)
                fail("Expected identifier following macro statement", name_offset);
            n->str = callee->str;
            parse_args(n->a, /*parameters=*/true);
            expect(T::kCloseStatement, "Expected closing statement token");
            parse_body_until({"endmacro"}, n->b, open_offset, "macro");
            expect_end_tag("endmacro");
            return n;
        }
        if (name == "for") {
            ++current_;
            auto n = parse_for(open_offset);
            expect_end_tag("endfor");
            return n;
        }
        if (name == "call") {
            ++current_;
            auto n = make(NodeKind::kCallBlock, open_offset);
            if (is(T::kOpenParen)) parse_args(n->a, /*parameters=*/true);
            size_t callee_offset = here();
            auto callee = parse_primary();
            if (callee->kind != NodeKind::kIdentifier)
                fail("Expected identifier following call statement", callee_offset);
            auto call = make(NodeKind::kCall, callee_offset);
            call->x = std::move(callee);
            parse_args(call->a, /*parameters=*/false);
            n->x = std::move(call);
            expect(T::kCloseStatement, "Expected closing statement token");
            parse_body_until({"endcall"}, n->b, open_offset, "call");
            expect_end_tag("endcall");
            return n;
        }
        if (name == "break" || name == "continue") {
            ++current_;
            expect(T::kCloseStatement, "Expected closing statement token");
            return make(name == "break" ? NodeKind::kBreak : NodeKind::kContinue, open_offset);
        }
        if (name == "filter") {
            ++current_;
            auto n = make(NodeKind::kFilterBlock, open_offset);
            size_t filter_offset = here();
            auto filter = parse_primary();
            if (filter->kind == NodeKind::kIdentifier && is(T::kOpenParen)) {
                filter = parse_call(std::move(filter), filter_offset);
            }
            n->x = std::move(filter);
            expect(T::kCloseStatement, "Expected closing statement token");
            parse_body_until({"endfilter"}, n->a, open_offset, "filter");
            expect_end_tag("endfilter");
            return n;
        }
        fail("Unknown statement type: " + name, name_offset);
    }

    NodePtr parse_set(size_t open_offset) {
        auto n = make(NodeKind::kSet, open_offset);
        n->x = parse_expression_sequence(false);
        if (is(T::kEquals)) {
            ++current_;
            n->y = parse_expression_sequence(false);
        } else {
            expect(T::kCloseStatement, "Expected '=' or %} after set target");
            parse_body_until({"endset"}, n->a, open_offset, "set");
            expect(T::kOpenStatement, "Expected {% endset %}");
            expect_identifier("endset");
        }
        expect(T::kCloseStatement, "Expected closing statement token");
        return n;
    }

    NodePtr parse_if(size_t open_offset) {
        DepthGuard guard(*this);
        auto n = make(NodeKind::kIf, open_offset);
        n->x = parse_expression();
        expect(T::kCloseStatement, "Expected closing statement token");
        parse_body_until({"elif", "else", "endif"}, n->a, open_offset, "if");
        if (is_statement({"elif"})) {
            size_t elif_offset = here();
            current_ += 2;
            n->b.push_back(parse_if(elif_offset));
        } else if (is_statement({"else"})) {
            current_ += 2;
            expect(T::kCloseStatement, "Expected closing statement token");
            parse_body_until({"endif"}, n->b, open_offset, "if");
        }
        return n;
    }

    NodePtr parse_for(size_t open_offset) {
        auto n = make(NodeKind::kFor, open_offset);
        size_t var_offset = here();
        n->x = parse_expression_sequence(true);
        if (n->x->kind != NodeKind::kIdentifier && n->x->kind != NodeKind::kTuple) {
            fail("Expected identifier/tuple for the loop variable", var_offset);
        }
        if (!is_identifier("in")) error("Expected `in` keyword following loop variable");
        ++current_;
        auto iterable = parse_expression();
        if (iterable->kind == NodeKind::kSelect) {  // `for x in xs if cond`
            n->y = std::move(iterable->x);
            n->z = std::move(iterable->y);
        } else {
            n->y = std::move(iterable);
        }
        expect(T::kCloseStatement, "Expected closing statement token");
        parse_body_until({"endfor", "else"}, n->a, open_offset, "for");
        if (is_statement({"else"})) {
            current_ += 2;
            expect(T::kCloseStatement, "Expected closing statement token");
            parse_body_until({"endfor"}, n->b, open_offset, "for");
        }
        return n;
    }

    NodePtr parse_expression_sequence(bool primary) {
        size_t offset = here();
        NodePtr first = primary ? parse_primary() : parse_expression();
        if (!is(T::kComma)) return first;
        auto tuple = make(NodeKind::kTuple, offset);
        tuple->a.push_back(std::move(first));
        while (is(T::kComma)) {
            ++current_;
            tuple->a.push_back(primary ? parse_primary() : parse_expression());
        }
        return tuple;
    }

    NodePtr parse_expression() {
        DepthGuard guard(*this);
        return parse_if_expression();
    }

    NodePtr parse_if_expression() {
        size_t offset = here();
        auto a = parse_logical_or();
        if (is_identifier("if")) {
            ++current_;
            auto test = parse_logical_or();
            if (is_identifier("else")) {
                ++current_;
                auto n = make(NodeKind::kTernary, offset);
                n->x = std::move(test);
                n->y = std::move(a);
                DepthGuard guard(*this);
                n->z = parse_if_expression();
                return n;
            }
            auto n = make(NodeKind::kSelect, offset);
            n->x = std::move(a);
            n->y = std::move(test);
            return n;
        }
        return a;
    }

    NodePtr binary(std::string op, NodePtr left, NodePtr right, size_t offset) {
        auto n = make(NodeKind::kBinary, offset);
        n->str = std::move(op);
        n->x = std::move(left);
        n->y = std::move(right);
        return n;
    }

    NodePtr parse_logical_or() {
        auto left = parse_logical_and();
        while (is_identifier("or")) {
            size_t offset = here();
            ++current_;
            left = binary("or", std::move(left), parse_logical_and(), offset);
        }
        return left;
    }

    NodePtr parse_logical_and() {
        auto left = parse_logical_not();
        while (is_identifier("and")) {
            size_t offset = here();
            ++current_;
            left = binary("and", std::move(left), parse_logical_not(), offset);
        }
        return left;
    }

    NodePtr parse_logical_not() {
        if (is_identifier("not")) {
            DepthGuard guard(*this);
            size_t offset = here();
            ++current_;
            auto n = make(NodeKind::kUnary, offset);
            n->str = "not";
            n->x = parse_logical_not();
            return n;
        }
        return parse_comparison();
    }

    NodePtr parse_comparison() {
        auto left = parse_additive();
        while (true) {
            size_t offset = here();
            std::string op;
            if (is_identifier("not") && is_identifier("in", 1)) {
                op = "not in";
                current_ += 2;
            } else if (is_identifier("in")) {
                op = "in";
                ++current_;
            } else if (is(T::kComparisonBinaryOperator)) {
                op = next().value;
            } else {
                break;
            }
            left = binary(op, std::move(left), parse_additive(), offset);
        }
        return left;
    }

    NodePtr parse_additive() {
        auto left = parse_multiplicative();
        while (is(T::kAdditiveBinaryOperator)) {
            size_t offset = here();
            std::string op = next().value;
            left = binary(op, std::move(left), parse_multiplicative(), offset);
        }
        return left;
    }

    NodePtr parse_multiplicative() {
        auto left = parse_power();
        while (is(T::kMultiplicativeBinaryOperator)) {
            size_t offset = here();
            std::string op = next().value;
            left = binary(op, std::move(left), parse_power(), offset);
        }
        return left;
    }

    NodePtr parse_power() {
        auto left = parse_test();
        while (is(T::kExponentiationBinaryOperator)) {
            size_t offset = here();
            std::string op = next().value;
            left = binary(op, std::move(left), parse_test(), offset);
        }
        return left;
    }

    // Can the token at current_ start a one-argument test's argument (`x is divisibleby 3`)?
    bool starts_test_argument() const {
        if (is(T::kNumericLiteral) || is(T::kStringLiteral) || is(T::kOpenSquareBracket) ||
            is(T::kOpenCurlyBracket)) {
            return true;
        }
        if (!is(T::kIdentifier)) return false;
        static const std::set<std::string> kStop = {"and", "or", "if", "else", "is", "not", "in"};
        return !kStop.count(peek().value);
    }

    NodePtr parse_test() {
        auto operand = parse_filter();
        while (is_identifier("is")) {
            size_t offset = here();
            ++current_;
            auto n = make(NodeKind::kTest, offset);
            n->flag = is_identifier("not");
            if (n->flag) ++current_;
            size_t name_offset = here();
            auto name = parse_primary();
            if (name->kind == NodeKind::kIdentifier) {
                n->str = name->str;
            } else if (name->kind == NodeKind::kInt || name->kind == NodeKind::kFloat) {
                fail("Expected identifier for the test", name_offset);
            } else {
                fail("Expected identifier for the test", name_offset);
            }
            if (is(T::kOpenParen)) {
                parse_args(n->a, false);
            } else if (starts_test_argument()) {
                n->a.push_back(parse_additive());
            }
            n->x = std::move(operand);
            operand = std::move(n);
        }
        return operand;
    }

    NodePtr parse_filter() {
        auto operand = parse_unary_sign();
        while (is(T::kPipe)) {
            size_t offset = here();
            ++current_;
            size_t filter_offset = here();
            auto filter = parse_primary();
            if (filter->kind != NodeKind::kIdentifier)
                fail("Expected identifier for the filter", filter_offset);
            if (is(T::kOpenParen)) filter = parse_call(std::move(filter), filter_offset);
            auto n = make(NodeKind::kFilter, offset);
            n->x = std::move(operand);
            n->y = std::move(filter);
            operand = std::move(n);
        }
        return operand;
    }

    NodePtr parse_unary_sign() {
        if ((is(T::kUnaryOperator) || is(T::kAdditiveBinaryOperator)) &&
            (peek().value == "-" || peek().value == "+")) {
            DepthGuard guard(*this);
            size_t offset = here();
            auto n = make(NodeKind::kUnary, offset);
            n->str = next().value;
            n->x = parse_unary_sign();
            return n;
        }
        return parse_call_member();
    }

    NodePtr parse_call_member() {
        size_t offset = here();
        auto member = parse_member(parse_primary());
        if (is(T::kOpenParen)) return parse_call(std::move(member), offset);
        return member;
    }

    NodePtr parse_call(NodePtr callee, size_t offset) {
        DepthGuard guard(*this);
        auto n = make(NodeKind::kCall, offset);
        n->x = std::move(callee);
        parse_args(n->a, false);
        auto expr = parse_member(std::move(n));
        if (is(T::kOpenParen)) expr = parse_call(std::move(expr), offset);
        return expr;
    }

    void parse_args(std::vector<NodePtr>& args, bool parameters) {
        expect(T::kOpenParen, "Expected opening parenthesis for arguments list");
        std::set<std::string> names;
        bool saw_keyword = false, saw_spread = false;
        while (!is(T::kCloseParen)) {
            size_t offset = here();
            bool kw_spread = is(T::kExponentiationBinaryOperator);
            bool pos_spread = is(T::kMultiplicativeBinaryOperator) && peek().value == "*";
            if (parameters && (kw_spread || pos_spread)) {
                error("Argument unpacking is not allowed in parameter declarations");
            }
            if (kw_spread) {
                ++current_;
                auto n = make(NodeKind::kKwSpread, offset);
                n->x = parse_expression();
                args.push_back(std::move(n));
                if (is(T::kComma)) ++current_;
                if (!is(T::kCloseParen))
                    error("Expected closing parenthesis: `**` must be applied to the final argument");
                break;
            }
            NodePtr arg;
            if (pos_spread) {
                if (saw_spread) error("Only one `*` argument unpacking is allowed");
                saw_spread = true;
                ++current_;
                arg = make(NodeKind::kSpread, offset);
                arg->x = parse_expression();
            } else {
                arg = parse_expression();
                if (is(T::kEquals)) {
                    ++current_;
                    if (arg->kind != NodeKind::kIdentifier) {
                        fail(parameters ? "Expected identifier for parameter declaration"
                                        : "Expected identifier for keyword argument",
                             offset);
                    }
                    auto kw = make(NodeKind::kKwarg, offset);
                    kw->str = arg->str;
                    kw->x = parse_expression();
                    arg = std::move(kw);
                }
                if (parameters) {
                    if (arg->kind != NodeKind::kIdentifier && arg->kind != NodeKind::kKwarg) {
                        fail("Expected identifier for parameter declaration", offset);
                    }
                    if (!names.insert(arg->str).second) fail("Duplicate parameter name: " + arg->str, offset);
                }
                if (arg->kind == NodeKind::kKwarg) {
                    saw_keyword = true;
                } else if (saw_keyword) {
                    fail(parameters ? "Non-default argument follows default argument"
                                    : "Positional arguments must come before keyword arguments",
                         offset);
                } else if (saw_spread) {
                    fail("Positional arguments must not follow `*` argument unpacking", offset);
                }
            }
            args.push_back(std::move(arg));
            if (is(T::kComma)) ++current_;
        }
        expect(T::kCloseParen, "Expected closing parenthesis for arguments list");
    }

    NodePtr parse_member_arguments() {
        size_t offset = here();
        std::vector<NodePtr> slices;
        bool is_slice = false;
        while (!is(T::kCloseSquareBracket)) {
            if (is(T::kColon)) {
                slices.push_back(nullptr);
                ++current_;
                is_slice = true;
            } else {
                slices.push_back(parse_expression());
                if (is(T::kColon)) {
                    ++current_;
                    is_slice = true;
                }
            }
        }
        if (slices.empty()) error("Expected at least one argument for member/slice expression");
        if (is_slice) {
            if (slices.size() > 3) fail("Expected 0-3 arguments for slice expression", offset);
            auto n = make(NodeKind::kSlice, offset);
            n->x = std::move(slices[0]);
            if (slices.size() > 1) n->y = std::move(slices[1]);
            if (slices.size() > 2) n->z = std::move(slices[2]);
            return n;
        }
        return std::move(slices[0]);
    }

    NodePtr parse_member(NodePtr object) {
        while (is(T::kDot) || is(T::kOpenSquareBracket)) {
            size_t offset = here();
            bool computed = is(T::kOpenSquareBracket);
            ++current_;
            auto n = make(NodeKind::kMember, offset);
            n->flag = computed;
            if (computed) {
                n->y = parse_member_arguments();
                expect(T::kCloseSquareBracket, "Expected closing square bracket");
            } else {
                size_t prop_offset = here();
                n->y = parse_primary();
                if (n->y->kind != NodeKind::kIdentifier && n->y->kind != NodeKind::kInt) {
                    fail("Expected identifier or integer following dot operator", prop_offset);
                }
            }
            n->x = std::move(object);
            object = std::move(n);
        }
        return object;
    }

    NodePtr parse_primary() {
        DepthGuard guard(*this);
        size_t offset = here();
        const Token& t = next();
        switch (t.type) {
            case T::kNumericLiteral: {
                if (t.value.find('.') != std::string::npos) {
                    auto n = make(NodeKind::kFloat, offset);
                    n->fval = std::stod(t.value);
                    return n;
                }
                auto n = make(NodeKind::kInt, offset);
                try {
                    n->ival = std::stoll(t.value);
                } catch (const std::exception&) {
                    fail("Integer literal out of range: " + t.value, offset);
                }
                return n;
            }
            case T::kStringLiteral: {
                auto n = make(NodeKind::kString, offset);
                n->str = t.value;
                while (is(T::kStringLiteral)) n->str += next().value;
                return n;
            }
            case T::kIdentifier: {
                auto n = make(NodeKind::kIdentifier, offset);
                n->str = t.value;
                return n;
            }
            case T::kOpenParen: {
                auto e = parse_expression_sequence(false);
                expect(T::kCloseParen, "Expected closing parenthesis");
                return e;
            }
            case T::kOpenSquareBracket: {
                auto n = make(NodeKind::kArray, offset);
                while (!is(T::kCloseSquareBracket)) {
                    n->a.push_back(parse_expression());
                    if (is(T::kComma)) ++current_;
                }
                ++current_;
                return n;
            }
            case T::kOpenCurlyBracket: {
                auto n = make(NodeKind::kObject, offset);
                while (!is(T::kCloseCurlyBracket)) {
                    n->a.push_back(parse_expression());
                    expect(T::kColon, "Expected colon between key and value in object literal");
                    n->b.push_back(parse_expression());
                    if (is(T::kComma)) ++current_;
                }
                ++current_;
                return n;
            }
            default:
                fail(std::string("Unexpected token: ") + token_type_name(t.type) + " '" + t.value + "'",
                     offset);
        }
    }
};

}  // namespace

NodePtr parse(const std::vector<Token>& tokens, size_t source_size) {
    Parser parser(tokens, source_size);
    return parser.parse_program();
}

}  // namespace sluice::jinja
