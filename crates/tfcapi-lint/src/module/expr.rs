//! A small, syntax-independent view of the expressions the output checks look at: literals,
//! collections, conditionals and function calls, each with its line. HCL expressions (`hcl::edit`)
//! and `.tf.json` values both lower to it; references are collected separately.

use super::json::{JsonNode, JsonValue};
use hcl::edit::Span;
use hcl::edit::expr::{Expression, FuncCall, ObjectKey, Traversal, TraversalOperator};
use hcl::edit::template::{Element, Template};
use hcl::edit::visit::{self, Visit};
use std::collections::BTreeSet;

/// Byte offsets to 1-based lines.
#[derive(Debug, Clone)]
pub struct LineIndex {
    starts: Vec<usize>,
    first_line: u32,
}

impl LineIndex {
    /// Indexes a text.
    pub fn new(text: &str) -> Self {
        Self::starting_at(text, 1)
    }

    /// Indexes a part of a file whose first character is on line `first_line`.
    pub fn starting_at(text: &str, first_line: u32) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self { starts, first_line }
    }

    /// The line holding byte `offset`.
    pub fn line(&self, offset: usize) -> u32 {
        let idx = match self.starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i.saturating_sub(1),
        };
        u32::try_from(idx)
            .unwrap_or(u32::MAX)
            .saturating_add(self.first_line)
    }
}

/// An expression and the line it starts on.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// 1-based line.
    pub line: u32,
    /// What it is.
    pub kind: Kind,
}

/// The shapes the checks distinguish.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `null`.
    Null,
    /// A bool literal.
    Bool(bool),
    /// A number literal; `integer` is false for a fraction or an exponent.
    Number {
        /// Whether it is a whole number written without fraction or exponent.
        integer: bool,
    },
    /// A string without interpolation.
    Str(String),
    /// A string template; a template that is one interpolation keeps its inner expression (its
    /// value is that expression's value, not a string).
    Template(Option<Box<Node>>),
    /// `[...]`.
    Array(Vec<Node>),
    /// `{...}`; keys that are not plain names are `None`.
    Object(Vec<(Option<String>, Node)>),
    /// `c ? a : b`, keeping both results.
    Conditional(Box<Node>, Box<Node>),
    /// A function call, by its unqualified name.
    Call(String, Vec<Node>),
    /// A `for` expression; `object` for `{for ...}`.
    For {
        /// Builds an object rather than a tuple.
        object: bool,
    },
    /// A reference such as `var.x` or `aws_lb.cp.dns_name`.
    Reference(String),
    /// Anything else (operators, splats, indexes).
    Other,
}

impl Node {
    /// The results of a conditional tree (the node itself when it is not a conditional).
    pub fn results(&self) -> Vec<&Node> {
        match &self.kind {
            Kind::Conditional(a, b) => {
                let mut out = a.results();
                out.extend(b.results());
                out
            }
            Kind::Template(Some(inner)) => inner.results(),
            _ => vec![self],
        }
    }

    /// The value of object key `key`, if this is an object literal that has it.
    pub fn field(&self, key: &str) -> Option<&Node> {
        match &self.kind {
            Kind::Object(entries) => entries
                .iter()
                .find(|(k, _)| k.as_deref() == Some(key))
                .map(|(_, v)| v),
            _ => None,
        }
    }

    /// Every node of the literal tree under this one (itself included).
    pub fn walk<'a>(&'a self, out: &mut Vec<&'a Node>) {
        out.push(self);
        match &self.kind {
            Kind::Array(items) => items.iter().for_each(|n| n.walk(out)),
            Kind::Object(entries) => entries.iter().for_each(|(_, n)| n.walk(out)),
            Kind::Conditional(a, b) => {
                a.walk(out);
                b.walk(out);
            }
            Kind::Template(Some(inner)) => inner.walk(out),
            Kind::Call(_, args) => args.iter().for_each(|n| n.walk(out)),
            _ => {}
        }
    }
}

/// Lowers HCL expressions; `fixed_line` pins every node to one line (templates inside JSON).
#[derive(Debug)]
pub struct Lower<'a> {
    lines: &'a LineIndex,
    fixed_line: Option<u32>,
}

impl<'a> Lower<'a> {
    /// A lowerer for one source text.
    pub fn new(lines: &'a LineIndex) -> Self {
        Self {
            lines,
            fixed_line: None,
        }
    }

    fn line_of(&self, expr: &Expression, fallback: u32) -> u32 {
        self.fixed_line.unwrap_or_else(|| {
            expr.span()
                .map_or(fallback, |span| self.lines.line(span.start))
        })
    }

    /// Lowers one expression; `fallback` is the line used when it has no span.
    pub fn expr(&self, expr: &Expression, fallback: u32) -> Node {
        let line = self.line_of(expr, fallback);
        let kind = match expr {
            Expression::Null(_) => Kind::Null,
            Expression::Bool(b) => Kind::Bool(*b.value()),
            Expression::Number(n) => Kind::Number {
                integer: !n.value().is_f64(),
            },
            Expression::String(s) => Kind::Str(s.value().clone()),
            Expression::StringTemplate(t) => self.template(t, line),
            Expression::HeredocTemplate(h) => self.template(&h.template, line),
            Expression::Array(items) => {
                Kind::Array(items.iter().map(|e| self.expr(e, line)).collect())
            }
            Expression::Object(obj) => Kind::Object(
                obj.iter()
                    .map(|(k, v)| (object_key(k), self.expr(v.expr(), line)))
                    .collect(),
            ),
            Expression::Parenthesis(p) => return self.expr(p.inner(), line),
            Expression::Conditional(c) => Kind::Conditional(
                Box::new(self.expr(&c.true_expr, line)),
                Box::new(self.expr(&c.false_expr, line)),
            ),
            Expression::FuncCall(call) => Kind::Call(
                call.name.name.as_str().to_owned(),
                call.args.iter().map(|e| self.expr(e, line)).collect(),
            ),
            Expression::ForExpr(f) => Kind::For {
                object: f.key_expr.is_some(),
            },
            Expression::Variable(v) => Kind::Reference(v.as_str().to_owned()),
            Expression::Traversal(t) => traversal_path(t).map_or(Kind::Other, Kind::Reference),
            Expression::UnaryOp(_) | Expression::BinaryOp(_) => Kind::Other,
        };
        Node { line, kind }
    }

    fn template(&self, template: &Template, line: u32) -> Kind {
        let mut elements = template.iter().filter(|e| match e {
            Element::Literal(l) => !l.value().is_empty(),
            _ => true,
        });
        match (elements.next(), elements.next()) {
            (Some(Element::Interpolation(i)), None) => {
                Kind::Template(Some(Box::new(self.expr(&i.expr, line))))
            }
            _ => Kind::Template(None),
        }
    }
}

fn object_key(key: &ObjectKey) -> Option<String> {
    match key {
        ObjectKey::Ident(id) => Some(id.as_str().to_owned()),
        ObjectKey::Expression(Expression::String(s)) => Some(s.value().clone()),
        ObjectKey::Expression(Expression::Variable(v)) => Some(v.as_str().to_owned()),
        ObjectKey::Expression(_) => None,
    }
}

fn traversal_path(t: &Traversal) -> Option<String> {
    let Expression::Variable(root) = &t.expr else {
        return None;
    };
    let mut path = root.as_str().to_owned();
    for op in &t.operators {
        match op.value() {
            TraversalOperator::GetAttr(name) => {
                path.push('.');
                path.push_str(name.as_str());
            }
            _ => break,
        }
    }
    Some(path)
}

/// Lowers a `.tf.json` value: a literal when `expressions` is false (a variable default), else
/// with strings read as templates, as Terraform's JSON syntax does for expression arguments.
pub fn lower_json(node: &JsonNode, expressions: bool) -> Node {
    let line = node.line;
    let kind = match &node.value {
        JsonValue::Null => Kind::Null,
        JsonValue::Bool(b) => Kind::Bool(*b),
        JsonValue::Number(text) => Kind::Number {
            integer: !text.contains(['.', 'e', 'E']),
        },
        JsonValue::String(s) if expressions && (s.contains("${") || s.contains("%{")) => {
            match hcl::edit::parser::parse_template(s) {
                Ok(t) => {
                    let lines = LineIndex::new(s);
                    let lower = Lower {
                        lines: &lines,
                        fixed_line: Some(line),
                    };
                    lower.template(&t, line)
                }
                Err(_) => Kind::Template(None),
            }
        }
        JsonValue::String(s) => Kind::Str(s.clone()),
        JsonValue::Array(items) => {
            Kind::Array(items.iter().map(|n| lower_json(n, expressions)).collect())
        }
        JsonValue::Object(members) => Kind::Object(
            members
                .iter()
                .map(|(k, v)| (Some(k.clone()), lower_json(v, expressions)))
                .collect(),
        ),
    };
    Node { line, kind }
}

/// Collects `var.NAME` and `local.NAME` references (as `var.NAME`, `local.NAME`).
#[derive(Debug, Default)]
pub struct Refs {
    /// The references found.
    pub found: BTreeSet<String>,
    /// Skip arguments of `nonsensitive(...)` (for sensitivity tracking).
    pub skip_nonsensitive: bool,
}

impl Refs {
    /// A collector that sees through every call.
    pub fn all() -> Self {
        Self::default()
    }

    /// A collector that ignores what `nonsensitive(...)` wraps.
    pub fn sensitive() -> Self {
        Self {
            found: BTreeSet::new(),
            skip_nonsensitive: true,
        }
    }

    /// Collects from the strings of a `.tf.json` value (each read as a template).
    pub fn json(&mut self, node: &JsonNode) {
        match &node.value {
            JsonValue::String(s) => {
                if s.contains("${") || s.contains("%{") {
                    if let Ok(t) = hcl::edit::parser::parse_template(s) {
                        self.visit_template(&t);
                    }
                } else if let Ok(e) = hcl::edit::parser::parse_expr(s) {
                    // Bare references appear in JSON arguments like depends_on.
                    if matches!(e, Expression::Traversal(_)) {
                        self.visit_expr(&e);
                    }
                }
            }
            JsonValue::Array(items) => items.iter().for_each(|n| self.json(n)),
            JsonValue::Object(members) => members.iter().for_each(|(_, n)| self.json(n)),
            _ => {}
        }
    }
}

impl Visit for Refs {
    fn visit_traversal(&mut self, node: &Traversal) {
        if let Expression::Variable(root) = &node.expr
            && matches!(root.as_str(), "var" | "local")
            && let Some(first) = node.operators.first()
            && let TraversalOperator::GetAttr(name) = first.value()
        {
            self.found
                .insert(format!("{}.{}", root.as_str(), name.as_str()));
        }
        visit::visit_traversal(self, node);
    }

    fn visit_func_call(&mut self, node: &FuncCall) {
        if self.skip_nonsensitive && node.name.name.as_str() == "nonsensitive" {
            return;
        }
        visit::visit_func_call(self, node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lower(src: &str) -> Node {
        let e = hcl::edit::parser::parse_expr(src).unwrap();
        let lines = LineIndex::new(src);
        Lower::new(&lines).expr(&e, 1)
    }

    #[test]
    fn lowers_shapes() {
        assert_eq!(lower("null").kind, Kind::Null);
        assert_eq!(lower("(null)").kind, Kind::Null);
        assert!(matches!(lower("sort(x)").kind, Kind::Call(ref n, _) if n == "sort"));
        assert!(
            matches!(lower("\"${sort(x)}\"").results()[0].kind, Kind::Call(ref n, _) if n == "sort")
        );
        assert!(matches!(lower("\"a${x}\"").kind, Kind::Template(None)));
        assert_eq!(lower("1.5").kind, Kind::Number { integer: false });
        assert_eq!(lower("15").kind, Kind::Number { integer: true });
        assert_eq!(lower("a ? null : (null)").results().len(), 2);
        assert_eq!(lower("var.a.b[0]").kind, Kind::Reference("var.a.b".into()));
        assert_eq!(
            lower("{\n a = 1\n b = [\n 2.5]\n}")
                .field("b")
                .unwrap()
                .line,
            3
        );
    }

    #[test]
    fn lines_from_offsets() {
        let li = LineIndex::new("a\nbc\n\nd");
        assert_eq!(li.line(0), 1);
        assert_eq!(li.line(2), 2);
        assert_eq!(li.line(4), 2);
        assert_eq!(li.line(5), 3);
        assert_eq!(li.line(6), 4);
    }
}
