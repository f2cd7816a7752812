//! The graph in Google Model Explorer's JSON graph format (a graph collection: `label`, and
//! `graphs` of nodes with `id`, `label`, `namespace`, `attrs`, `incomingEdges`,
//! `outputsMetadata`, as its adapters return it), so Rustral's IR can be read in a viewer users
//! already know.
//!
//! Module paths become namespaces (`encoder.layer.0.attention` -> `encoder/layer.0/attention`:
//! a numbered component stays with its parent, so layers collapse as layers), fused ops carry
//! Model Explorer's node style so they stand out as in the DOT drawing, and each graph output
//! is a node of its own. Node ids are the text IR's `%N` numbers, so the JSON, the text IR and
//! the DOT drawing name a node alike; the output is deterministic.

use crate::text::op_text;
use crate::{Graph, Op};
use serde_json::{Value, json};

/// Model Explorer's JSON for `g`, pretty-printed.
pub fn to_model_explorer(g: &Graph) -> String {
    let numbering = g.numbering();
    let order = g.topo_order().unwrap_or_else(|_| g.node_ids().collect());
    let mut nodes: Vec<Value> = Vec::with_capacity(order.len() + g.outputs().len());
    for &id in &order {
        let n = g.node(id).expect("ordered node exists");
        let mut attrs = vec![kv("op", &op_text(&n.op)), kv("type", &n.ty.to_string())];
        if !n.provenance.is_empty() {
            attrs.push(kv("module", &n.provenance));
        }
        if !n.loc.is_empty() {
            attrs.push(kv("source", &crate::loc::loc_summary(&n.loc, usize::MAX)));
        }
        let label = match &n.op {
            Op::Input { name } | Op::Param { name } => format!("{} {name}", n.op.name()),
            op => op.name().to_string(),
        };
        let edges: Vec<Value> = g
            .operands(id)
            .iter()
            .enumerate()
            .map(|(pos, o)| json!({"sourceNodeId": numbering[o].to_string(), "sourceNodeOutputId": "0", "targetNodeInputId": pos.to_string()}))
            .collect();
        let mut node = json!({
            "id": numbering[&id].to_string(),
            "label": label,
            "namespace": namespace(&n.provenance),
            "attrs": attrs,
            "incomingEdges": edges,
            "outputsMetadata": [{"id": "0", "attrs": [kv("tensor_shape", &n.ty.to_string())]}],
        });
        if n.op.is_fused() {
            node["style"] = json!({"backgroundColor": "#ffb347", "borderColor": "#c77700"});
        }
        nodes.push(node);
    }
    for (i, o) in g.outputs().iter().enumerate() {
        let Some(source) = numbering.get(&o.node) else { continue };
        nodes.push(json!({
            "id": format!("output{i}"),
            "label": format!("output {}", o.name),
            "namespace": "",
            "attrs": [kv("output", &o.name)],
            "incomingEdges": [{"sourceNodeId": source.to_string(), "sourceNodeOutputId": "0", "targetNodeInputId": "0"}],
            "outputsMetadata": [],
        }));
    }
    let doc = json!({"label": g.name(), "graphs": [{"id": g.name(), "nodes": nodes}]});
    let mut text = serde_json::to_string_pretty(&doc).expect("JSON values serialize");
    text.push('\n');
    text
}

fn kv(key: &str, value: &str) -> Value {
    json!({"key": key, "value": value})
}

/// A module path as a Model Explorer namespace: dots separate levels, except before a number,
/// which names an item of its parent (`layer.0` is one level).
fn namespace(path: &str) -> String {
    let mut out = String::new();
    for part in path.split('.').filter(|p| !p.is_empty()) {
        if !out.is_empty() {
            out.push(if part.chars().all(|c| c.is_ascii_digit()) { '.' } else { '/' });
        }
        out.push_str(part);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbered_components_stay_with_their_parent() {
        assert_eq!(namespace("encoder.layer.0.attention.self"), "encoder/layer.0/attention/self");
        assert_eq!(namespace("h.11.mlp"), "h.11/mlp");
        assert_eq!(namespace(""), "");
    }

    #[test]
    fn every_edge_and_output_is_a_node_reference() {
        let g = crate::parse(
            "graph \"t\" {\n  %0: f32[2, 3] = input \"x\"\n  %1: f32[2, 3] = relu %0  @mlp.0.act\n  \
             %2: f32[2, 3] = add %1, %0  @mlp.0\n  output \"y\" = %2\n}\n",
        )
        .unwrap();
        let v: Value = serde_json::from_str(&to_model_explorer(&g)).unwrap();
        let nodes = v["graphs"][0]["nodes"].as_array().unwrap();
        assert_eq!(nodes.len(), 4);
        assert_eq!(nodes[1]["namespace"], "mlp.0/act");
        assert_eq!(
            nodes[2]["incomingEdges"][1],
            json!({"sourceNodeId": "0", "sourceNodeOutputId": "0", "targetNodeInputId": "1"})
        );
        assert_eq!(nodes[3]["incomingEdges"][0]["sourceNodeId"], "2");
        assert_eq!(nodes[0]["label"], "input x");
        let reparsed = crate::parse(&crate::print(&g)).unwrap();
        assert_eq!(to_model_explorer(&g), to_model_explorer(&reparsed), "the same graph gives the same bytes");
    }
}
