//! Sans-IO MQTT 3.1/3.1.1 codec.
