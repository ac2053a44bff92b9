# owned by the oci engineer
