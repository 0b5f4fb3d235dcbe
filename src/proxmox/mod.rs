//! Proxmox VE REST API client: requests built as plain values, apart from sending.
