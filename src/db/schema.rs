// The diesel schema of the migrations (the shape `diesel print-schema`, configured in
// diesel.toml, writes); change the migrations first, then this file.

diesel::table! {
    outbox (id) {
        id -> Uuid,
        seq -> Int8,
        topic -> Text,
        payload -> Jsonb,
        partition_key -> Nullable<Text>,
        headers -> Nullable<Jsonb>,
        created_at -> Timestamptz,
        available_at -> Timestamptz,
        published_at -> Nullable<Timestamptz>,
        attempts -> Int4,
        last_error -> Nullable<Text>,
        dead_at -> Nullable<Timestamptz>,
        discarded_at -> Nullable<Timestamptz>,
        source_table -> Nullable<Text>,
    }
}

diesel::table! {
    outbox_adopted_tables (name) {
        name -> Text,
        spec -> Jsonb,
        function_name -> Text,
        adopted_at -> Timestamptz,
    }
}

diesel::table! {
    outbox_inbox (consumer_group, event_id) {
        consumer_group -> Text,
        event_id -> Uuid,
        topic -> Text,
        processed_at -> Timestamptz,
    }
}

diesel::table! {
    outbox_replicas (instance_id) {
        instance_id -> Text,
        version -> Text,
        started_at -> Timestamptz,
        last_seen_at -> Timestamptz,
        published_last_minute -> Int8,
        throughput -> Jsonb,
    }
}

diesel::table! {
    outbox_topics (topic) {
        topic -> Text,
        paused -> Bool,
        updated_at -> Timestamptz,
        maxlen -> Nullable<Int8>,
        partitions -> Nullable<Int4>,
        repair_below -> Nullable<Int8>,
        park_on_dead -> Bool,
    }
}

diesel::table! {
    outbox_idempotency (key) {
        key -> Text,
        request_hash -> Bytea,
        event_id -> Uuid,
        created_at -> Timestamptz,
    }
}

diesel::table! {
    outbox_audit (id) {
        id -> Int8,
        at -> Timestamptz,
        who -> Text,
        action -> Text,
        target -> Text,
        detail -> Jsonb,
    }
}

diesel::table! {
    outbox_wake (singleton) {
        singleton -> Bool,
        busy_until -> Timestamptz,
    }
}

diesel::allow_tables_to_appear_in_same_query!(
    outbox,
    outbox_adopted_tables,
    outbox_audit,
    outbox_idempotency,
    outbox_inbox,
    outbox_replicas,
    outbox_topics,
    outbox_wake,
);
