//! Terraform type constraints and whether a contract input's value converts to the type a module
//! declares (spec: Module Contract "Type conventions"; the `input/type` check).

use hcl::edit::expr::{Expression, ObjectKey};
use std::fmt;

/// A type constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ty {
    /// `any`.
    Any,
    /// `string`.
    String,
    /// `number`.
    Number,
    /// `bool`.
    Bool,
    /// `list(T)`.
    List(Box<Ty>),
    /// `set(T)`.
    Set(Box<Ty>),
    /// `map(T)`.
    Map(Box<Ty>),
    /// `object({...})`.
    Object(Vec<Attr>),
    /// `tuple([...])`.
    Tuple(Vec<Ty>),
}

/// One attribute of an object type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// The attribute name.
    pub name: String,
    /// Its type.
    pub ty: Ty,
    /// Declared `optional(...)`.
    pub optional: bool,
}

impl fmt::Display for Ty {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any"),
            Self::String => f.write_str("string"),
            Self::Number => f.write_str("number"),
            Self::Bool => f.write_str("bool"),
            Self::List(t) => write!(f, "list({t})"),
            Self::Set(t) => write!(f, "set({t})"),
            Self::Map(t) => write!(f, "map({t})"),
            Self::Tuple(ts) => {
                f.write_str("tuple([")?;
                for (i, t) in ts.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{t}")?;
                }
                f.write_str("])")
            }
            Self::Object(attrs) => {
                f.write_str("object({ ")?;
                for (i, a) in attrs.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if a.optional {
                        write!(f, "{} = optional({})", a.name, a.ty)?;
                    } else {
                        write!(f, "{} = {}", a.name, a.ty)?;
                    }
                }
                f.write_str(" })")
            }
        }
    }
}

/// Parses a type constraint written as a string (the contract tables, `.tf.json` files).
pub fn parse_type_str(text: &str) -> Result<Ty, String> {
    let expr = hcl::edit::parser::parse_expr(text)
        .map_err(|e| format!("`{text}` is not a type constraint: {}", e.message()))?;
    parse_type(&expr)
}

fn single_arg<'a>(name: &str, args: &'a [&'a Expression]) -> Result<&'a Expression, String> {
    match args {
        [one] => Ok(one),
        _ => Err(format!("{name}(...) takes exactly one argument")),
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

/// Parses a type constraint expression.
pub fn parse_type(expr: &Expression) -> Result<Ty, String> {
    match expr {
        Expression::Variable(v) => match v.as_str() {
            "any" => Ok(Ty::Any),
            "string" => Ok(Ty::String),
            "number" => Ok(Ty::Number),
            "bool" => Ok(Ty::Bool),
            other => Err(format!(
                "`{other}` is not a type (string, number, bool, any, list(...), ...)"
            )),
        },
        Expression::Parenthesis(p) => parse_type(p.inner()),
        Expression::FuncCall(call) => {
            if call.name.is_namespaced() {
                return Err("a namespaced function is not a type".to_owned());
            }
            let args: Vec<&Expression> = call.args.iter().collect();
            let name = call.name.name.as_str();
            match name {
                "list" => Ok(Ty::List(Box::new(parse_type(single_arg(name, &args)?)?))),
                "set" => Ok(Ty::Set(Box::new(parse_type(single_arg(name, &args)?)?))),
                "map" => Ok(Ty::Map(Box::new(parse_type(single_arg(name, &args)?)?))),
                "object" => match single_arg(name, &args)? {
                    Expression::Object(obj) => {
                        let mut attrs = Vec::new();
                        for (key, value) in obj {
                            let name = object_key(key).ok_or_else(|| {
                                "an object attribute name must be a name".to_owned()
                            })?;
                            let (ty, optional) = attr_type(value.expr())?;
                            attrs.push(Attr { name, ty, optional });
                        }
                        Ok(Ty::Object(attrs))
                    }
                    _ => Err("object(...) takes an object of attribute types".to_owned()),
                },
                "tuple" => match single_arg(name, &args)? {
                    Expression::Array(items) => Ok(Ty::Tuple(
                        items.iter().map(parse_type).collect::<Result<_, _>>()?,
                    )),
                    _ => Err("tuple(...) takes a list of element types".to_owned()),
                },
                "optional" => {
                    Err("optional(...) is only allowed on an object attribute".to_owned())
                }
                other => Err(format!("`{other}(...)` is not a type constructor")),
            }
        }
        _ => Err("not a type constraint".to_owned()),
    }
}

fn attr_type(expr: &Expression) -> Result<(Ty, bool), String> {
    if let Expression::FuncCall(call) = expr
        && !call.name.is_namespaced()
        && call.name.name.as_str() == "optional"
    {
        let args: Vec<&Expression> = call.args.iter().collect();
        return match args.as_slice() {
            [ty] | [ty, _] => Ok((parse_type(ty)?, true)),
            _ => Err("optional(...) takes a type and an optional default".to_owned()),
        };
    }
    Ok((parse_type(expr)?, false))
}

/// Whether a value of the contract's type `given` converts to the declared type `declared`
/// without losing anything the contract passes; the error says where it does not.
pub fn compatible(given: &Ty, declared: &Ty) -> Result<(), String> {
    match (given, declared) {
        (_, Ty::Any)
        | (Ty::Any, _)
        | (Ty::String, Ty::String)
        | (Ty::Number, Ty::Number)
        | (Ty::Bool, Ty::Bool) => Ok(()),
        (Ty::List(g) | Ty::Set(g), Ty::List(d) | Ty::Set(d)) | (Ty::Map(g), Ty::Map(d)) => {
            compatible(g, d).map_err(|e| format!("element: {e}"))
        }
        (Ty::Object(attrs), Ty::Map(d)) => {
            for a in attrs {
                compatible(&a.ty, d).map_err(|e| format!("attribute `{}`: {e}", a.name))?;
            }
            Ok(())
        }
        (Ty::Object(given_attrs), Ty::Object(declared_attrs)) => {
            for d in declared_attrs {
                match given_attrs.iter().find(|g| g.name == d.name) {
                    Some(g) => {
                        compatible(&g.ty, &d.ty)
                            .map_err(|e| format!("attribute `{}`: {e}", d.name))?;
                    }
                    None if d.optional => {}
                    None => {
                        return Err(format!(
                            "attribute `{}` is not passed by the contract; make it optional(...) or remove it",
                            d.name
                        ));
                    }
                }
            }
            Ok(())
        }
        (Ty::Tuple(g), Ty::Tuple(d)) if g.len() == d.len() => {
            for (i, (g, d)) in g.iter().zip(d).enumerate() {
                compatible(g, d).map_err(|e| format!("element {i}: {e}"))?;
            }
            Ok(())
        }
        _ => Err(format!("a {given} value does not convert to {declared}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Ty {
        parse_type_str(s).unwrap()
    }

    #[test]
    fn parses_contract_types() {
        for d in contract::inputs::CLUSTER_INPUTS
            .iter()
            .chain(contract::inputs::MACHINE_INPUTS)
            .chain(contract::inputs::MACHINEPOOL_INPUTS)
        {
            parse_type_str(d.type_expr).unwrap();
        }
        assert_eq!(
            t("object({ host = string, port = number })").to_string(),
            "object({ host = string, port = number })"
        );
    }

    #[test]
    fn optional_attributes_and_subsets_are_compatible() {
        let given = t(
            "object({ pods = list(string), services = list(string), service_domain = string, api_server_port = number })",
        );
        compatible(&given, &t("object({ pods = optional(list(string)), services = optional(list(string)), service_domain = optional(string), api_server_port = optional(number) })")).unwrap();
        compatible(&given, &t("object({ pods = list(string) })")).unwrap();
        compatible(&given, &t("any")).unwrap();
        assert!(compatible(&given, &t("object({ zone = string })")).is_err());
        compatible(&given, &t("object({ zone = optional(string, \"a\") })")).unwrap();
    }

    #[test]
    fn mismatches_are_reported() {
        assert!(compatible(&t("number"), &t("string")).is_err());
        assert!(compatible(&t("map(string)"), &t("object({ a = string })")).is_err());
        compatible(&t("list(string)"), &t("set(string)")).unwrap();
        compatible(&t("object({ a = string })"), &t("map(string)")).unwrap();
        assert!(parse_type_str("optional(string)").is_err());
        assert!(parse_type_str("strin").is_err());
    }
}
