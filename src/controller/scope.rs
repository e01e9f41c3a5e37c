//! What a watched scope (all namespaces, or one `--namespace`) means for the API; shared by
//! the Browser and BrowserConfig controllers.

use kube::Client;
use kube::api::Api;
use kube::core::DynamicResourceScope;

/// The API of `resource` over one namespace, or all namespaces for `None`.
pub(crate) fn scoped_api<K>(client: &Client, ns: Option<&str>, resource: &K::DynamicType) -> Api<K>
where
    K: kube::Resource<Scope = DynamicResourceScope>,
{
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, resource),
        None => Api::all_with(client.clone(), resource),
    }
}
