//! Whether a variable's `validation` condition accepts `null` (tfcapi-lint
//! `input/user-variable-default`: a user variable that defaults to `null` behind a validation
//! that rejects `null` is required in effect).
//!
//! The condition is evaluated with the variable set to `null`, the way the runtime evaluates it
//! when an object sets no value, over a small value domain: literals, the variable, the
//! operators, conditionals, and the functions whose handling of `null` decides the common
//! shapes (`try`, `can`, `coalesce`, `length`, `contains`, type conversions). Anything else the
//! evaluation cannot know (other references, other functions) is [`Value::Unknown`], and an
//! unknown answer is never reported: the check only warns when the condition surely rejects
//! `null`.
//!
//! What the runtime does, as checked against a real `tofu plan` by the integration tests: a
//! function that does not accept `null` (`length`, `contains`, `regex`, `upper`, ...) fails on
//! it, `try` and `can` turn that failure into a fallback, `coalesce` skips `null` and `""`,
//! comparing `null` with `==` and `!=` works, ordering or arithmetic on `null` fails, a
//! conditional only evaluates the branch its condition picks, a template that is one
//! interpolation is its value, and a side of `||` that is true (of `&&` that is false) decides
//! the operator even when the other side fails. Terraform (1.8, checked against a real
//! `terraform plan` the same way) evaluates both sides of `||` and `&&`, so there a failing side
//! fails the operator whatever the other side says: `var.x == null || length(var.x) > 0` accepts
//! null under OpenTofu and rejects it under Terraform.

use super::load::Runtime;
use hcl::edit::expr::{BinaryOperator, Expression, TraversalOperator, UnaryOperator};
use hcl::edit::template::{Element, Template};

/// What the condition evaluates to, as far as this check can tell.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// `null`.
    Null,
    /// A bool.
    Bool(bool),
    /// A number.
    Number(f64),
    /// A string.
    Str(String),
    /// A list or tuple, of `len` elements; `has_null` when one of them is `null`.
    List {
        /// Its length.
        len: usize,
        /// Whether an element is `null`.
        has_null: bool,
    },
    /// The evaluation fails (the runtime reports an error).
    Error,
    /// Not known without evaluating the module.
    Unknown,
}

/// The answer for one condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NullVerdict {
    /// The condition holds with the variable `null`.
    Accepts,
    /// The condition is false, `null` or fails with the variable `null`.
    Rejects,
    /// This check cannot tell.
    Unknown,
}

/// Evaluates `condition` (an HCL expression; in JSON syntax a template whose only part is one
/// interpolation) with `var.<variable>` set to `null`, as `runtime` evaluates it.
pub fn condition_with_null(condition: &str, variable: &str, runtime: Runtime) -> NullVerdict {
    let Ok(expr) = hcl::edit::parser::parse_expr(condition.trim()) else {
        return NullVerdict::Unknown;
    };
    let eval = Eval { variable, runtime };
    match eval.expr(&expr) {
        Value::Bool(true) => NullVerdict::Accepts,
        Value::Bool(false) | Value::Null | Value::Error => NullVerdict::Rejects,
        Value::Str(s) if s == "true" => NullVerdict::Accepts,
        Value::Str(s) if s == "false" => NullVerdict::Rejects,
        _ => NullVerdict::Unknown,
    }
}

/// A JSON-syntax condition string as the HCL expression it stands for: the inner expression of a
/// template that is one interpolation, else the string itself.
pub fn json_condition(text: &str) -> String {
    match hcl::edit::parser::parse_template(text) {
        Ok(t) => single_interpolation(&t).map_or_else(|| text.to_owned(), ToString::to_string),
        Err(_) => text.to_owned(),
    }
}

fn single_interpolation(t: &Template) -> Option<&Expression> {
    let mut parts = t.iter().filter(|e| match e {
        Element::Literal(l) => !l.value().trim().is_empty(),
        _ => true,
    });
    match (parts.next(), parts.next()) {
        (Some(Element::Interpolation(i)), None) => Some(&i.expr),
        _ => None,
    }
}

struct Eval<'a> {
    variable: &'a str,
    runtime: Runtime,
}

impl Eval<'_> {
    fn expr(&self, expr: &Expression) -> Value {
        match expr {
            Expression::Null(_) => Value::Null,
            Expression::Bool(b) => Value::Bool(*b.value()),
            Expression::Number(n) => n.value().as_f64().map_or(Value::Unknown, Value::Number),
            Expression::String(s) => Value::Str(s.value().clone()),
            Expression::Array(items) => {
                let values: Vec<Value> = items.iter().map(|e| self.expr(e)).collect();
                if values.contains(&Value::Error) {
                    return Value::Error;
                }
                Value::List {
                    len: values.len(),
                    has_null: values.contains(&Value::Null),
                }
            }
            Expression::StringTemplate(t) => self.template(t),
            Expression::HeredocTemplate(h) => self.template(&h.template),
            Expression::Parenthesis(p) => self.expr(p.inner()),
            Expression::Conditional(c) => match self.expr(&c.cond_expr) {
                Value::Bool(true) => self.expr(&c.true_expr),
                Value::Bool(false) => self.expr(&c.false_expr),
                Value::Null | Value::Error => Value::Error,
                _ => Value::Unknown,
            },
            Expression::FuncCall(call) => {
                let args: Vec<&Expression> = call.args.iter().collect();
                self.call(call.name.name.as_str(), &args)
            }
            Expression::Traversal(t) => self.traversal(&t.expr, &t.operators),
            Expression::UnaryOp(op) => unary(*op.operator.value(), self.expr(&op.expr)),
            Expression::BinaryOp(op) => binary(
                self.runtime,
                *op.operator.value(),
                self.expr(&op.lhs_expr),
                self.expr(&op.rhs_expr),
            ),
            Expression::Object(_) | Expression::ForExpr(_) | Expression::Variable(_) => {
                Value::Unknown
            }
        }
    }

    /// `var.<variable>` is `null`; an attribute or index of it fails; any other reference is
    /// unknown.
    fn traversal(
        &self,
        root: &Expression,
        operators: &[hcl::edit::Decorated<TraversalOperator>],
    ) -> Value {
        let Expression::Variable(root) = root else {
            return Value::Unknown;
        };
        let mut ops = operators.iter().map(hcl::edit::Decorated::value);
        let is_it = root.as_str() == "var"
            && matches!(ops.next(), Some(TraversalOperator::GetAttr(name)) if name.as_str() == self.variable);
        match (is_it, ops.next()) {
            (true, None) => Value::Null,
            (true, Some(_)) => Value::Error,
            (false, _) => Value::Unknown,
        }
    }

    /// A template interpolating `null` fails; one that is a single interpolation is its value.
    fn template(&self, t: &Template) -> Value {
        if let Some(inner) = single_interpolation(t) {
            return self.expr(inner);
        }
        let mut unknown = false;
        for element in t {
            match element {
                Element::Literal(_) => {}
                Element::Interpolation(i) => match self.expr(&i.expr) {
                    Value::Null | Value::Error => return Value::Error,
                    Value::Str(_) | Value::Number(_) | Value::Bool(_) => {}
                    _ => unknown = true,
                },
                Element::Directive(_) => unknown = true,
            }
        }
        if unknown {
            Value::Unknown
        } else {
            Value::Str(String::new())
        }
    }

    fn call(&self, name: &str, args: &[&Expression]) -> Value {
        match name {
            // Each argument is evaluated only when the ones before it failed.
            "try" => {
                for arg in args {
                    match self.expr(arg) {
                        Value::Error => {}
                        v => return v,
                    }
                }
                Value::Error
            }
            "can" => match args.first().map(|a| self.expr(a)) {
                Some(Value::Error) => Value::Bool(false),
                Some(Value::Unknown) | None => Value::Unknown,
                Some(_) => Value::Bool(true),
            },
            _ => {
                let values: Vec<Value> = args.iter().map(|a| self.expr(a)).collect();
                function(name, &values)
            }
        }
    }
}

/// The functions whose answer on these values is known; any other function fails on a `null`
/// argument (the runtime's functions refuse null unless they say otherwise) and is unknown
/// otherwise.
fn function(name: &str, args: &[Value]) -> Value {
    if args.contains(&Value::Error) {
        return Value::Error;
    }
    match (name, args) {
        // The first argument that is neither null nor an empty string.
        ("coalesce", _) => {
            for a in args {
                match a {
                    Value::Null => {}
                    Value::Str(s) if s.is_empty() => {}
                    Value::Unknown | Value::List { .. } => return Value::Unknown,
                    v => return v.clone(),
                }
            }
            Value::Error
        }
        ("length", [Value::Str(s)]) => Value::Number(s.chars().count() as f64),
        ("length", [Value::List { len, .. }]) => Value::Number(*len as f64),
        ("tostring" | "tonumber" | "tobool" | "tolist" | "toset" | "tomap", [Value::Null]) => {
            Value::Null
        }
        (
            "tostring" | "tonumber" | "tobool" | "tolist" | "toset" | "tomap" | "nonsensitive"
            | "sensitive",
            [v],
        ) => v.clone(),
        ("jsonencode", [Value::Null]) => Value::Str("null".to_owned()),
        ("type" | "merge" | "concat" | "compact" | "flatten" | "coalescelist" | "one", _) => {
            Value::Unknown
        }
        (_, args) if args.contains(&Value::Null) => Value::Error,
        _ => Value::Unknown,
    }
}

fn unary(op: UnaryOperator, v: Value) -> Value {
    match (op, v) {
        (_, Value::Null | Value::Error) => Value::Error,
        (UnaryOperator::Not, Value::Bool(b)) => Value::Bool(!b),
        (UnaryOperator::Neg, Value::Number(n)) => Value::Number(-n),
        _ => Value::Unknown,
    }
}

fn binary(runtime: Runtime, op: BinaryOperator, l: Value, r: Value) -> Value {
    use BinaryOperator as B;
    let failed = l == Value::Error || r == Value::Error;
    // A side that decides `||` (true) or `&&` (false) decides it whatever the other side is;
    // under OpenTofu even when the other side fails, under Terraform only when it does not.
    if matches!(op, B::And | B::Or) {
        let decisive = Value::Bool(op == B::Or);
        if (l == decisive || r == decisive) && (runtime == Runtime::Tofu || !failed) {
            return decisive;
        }
    }
    if failed {
        return Value::Error;
    }
    match op {
        B::Eq | B::NotEq => {
            let equal = match (&l, &r) {
                (Value::Unknown | Value::List { .. }, _)
                | (_, Value::Unknown | Value::List { .. }) => {
                    return Value::Unknown;
                }
                (a, b) => a == b,
            };
            Value::Bool(equal == (op == B::Eq))
        }
        B::And | B::Or => match (l, r) {
            (Value::Null, _) | (_, Value::Null) => Value::Error,
            (Value::Bool(a), Value::Bool(b)) => {
                Value::Bool(if op == B::Or { a || b } else { a && b })
            }
            _ => Value::Unknown,
        },
        _ => match (l, r) {
            (Value::Null, _) | (_, Value::Null) => Value::Error,
            (Value::Number(a), Value::Number(b)) => arithmetic(op, a, b),
            _ => Value::Unknown,
        },
    }
}

fn arithmetic(op: BinaryOperator, a: f64, b: f64) -> Value {
    use BinaryOperator as B;
    match op {
        B::Less => Value::Bool(a < b),
        B::LessEq => Value::Bool(a <= b),
        B::Greater => Value::Bool(a > b),
        B::GreaterEq => Value::Bool(a >= b),
        B::Plus => Value::Number(a + b),
        B::Minus => Value::Number(a - b),
        B::Mul => Value::Number(a * b),
        B::Div | B::Mod if b == 0.0 => Value::Error,
        B::Div => Value::Number(a / b),
        B::Mod => Value::Number(a % b),
        _ => Value::Unknown,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(condition: &str) -> NullVerdict {
        condition_with_null(condition, "x", Runtime::Tofu)
    }

    /// Terraform evaluates both sides of `||` and `&&`: a failing side fails the operator.
    #[test]
    fn under_terraform_a_failing_side_fails_the_logical_operator() {
        let terraform = |c: &str| condition_with_null(c, "x", Runtime::Terraform);
        assert_eq!(
            terraform("var.x == null || length(var.x) > 0"),
            NullVerdict::Rejects
        );
        assert_eq!(
            terraform("var.x != null ? length(var.x) > 0 : true"),
            NullVerdict::Accepts
        );
        assert_eq!(
            terraform("var.x == null || var.x == \"a\""),
            NullVerdict::Accepts
        );
    }

    #[test]
    fn the_shapes_that_accept_null_are_accepted() {
        for c in [
            "var.x == null || length(var.x) > 0",
            "var.x == null ? true : length(var.x) > 0",
            "var.x != null ? length(var.x) > 0 : true",
            "try(length(var.x) > 0, true)",
            "coalesce(var.x, \"ok\") != \"\"",
            "can(regex(\"^a\", var.x)) || var.x == null",
            "null == var.x",
            "!(var.x != null)",
            "contains([\"a\", \"b\"], var.x) || true",
            "contains(local.names, var.x) || var.x == null",
            "\"${var.x}\" != \"\"",
            "tostring(var.x) == null",
        ] {
            assert_eq!(verdict(c), NullVerdict::Accepts, "{c}");
        }
    }

    #[test]
    fn the_shapes_that_reject_null_are_rejected() {
        for c in [
            "length(var.x) > 0",
            "var.x != null",
            "can(regex(\"^a\", var.x))",
            "contains([\"a\", \"b\"], var.x)",
            "var.x > 0",
            "var.x.name != \"\"",
            "var.x[0] == 1",
            "var.x != null ? length(var.x) > 0 : false",
            "try(length(var.x) > 0, false)",
            "coalesce(var.x, \"\") != \"\"",
            "startswith(var.x, \"a\")",
            "var.x != null && length(var.x) > 0",
            "contains(local.names, var.x)",
            "\"a-${var.x}\" != \"\"",
        ] {
            assert_eq!(verdict(c), NullVerdict::Rejects, "{c}");
        }
    }

    #[test]
    fn what_needs_the_module_to_evaluate_is_unknown() {
        for c in [
            "local.allowed",
            "local.allowed || var.x != null",
            "alltrue([for v in var.y : v > 0])",
            "var.y == null",
            "(",
        ] {
            assert_eq!(verdict(c), NullVerdict::Unknown, "{c}");
        }
    }

    #[test]
    fn a_json_condition_is_its_interpolation() {
        assert_eq!(
            json_condition("${var.x == null || length(var.x) > 0}").trim(),
            "var.x == null || length(var.x) > 0"
        );
        assert_eq!(json_condition("plain"), "plain");
    }
}
