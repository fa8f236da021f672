// The Kafka side: kafkajs with the contract's settings.

import { CompressionTypes, Kafka, logLevel, Partitioners, type Producer, type ProducerConfig } from "kafkajs";

/** Kafka's Java client's partitioning of a keyed record: toPositive(murmur2(key)) % partitions.
 * kafkajs 2's DefaultPartitioner is that (set explicitly: it also silences kafkajs's warning).
 * Never LegacyPartitioner (kafkajs 1's default, another murmur2 variant), never a partition by hand. */
export const partitioner = Partitioners.DefaultPartitioner;

/** acks=all is the send's `acks: -1`; idempotence needs at most one request in flight in kafkajs. */
export function producerConfig(): ProducerConfig {
  return {
    createPartitioner: partitioner,
    idempotent: true,
    maxInFlightRequests: 1,
    allowAutoTopicCreation: false, // convlog creates the topic with its settings (docs/producers.md)
  };
}

export const ACKS_ALL = -1;
/** gzip: kafkajs's built-in codec (snappy, lz4 and zstd need codec packages of their own, some
 * native); convlog reads them all. */
export const COMPRESSION = CompressionTypes.GZIP;

export function connectProducer(brokers: string[]): Producer {
  const kafka = new Kafka({
    clientId: "convlog-ts-example",
    brokers,
    logLevel: logLevel.ERROR,
    // kafkajs logs to stdout by default; the example's stdout is its JSON lines.
    logCreator: () => ({ namespace, label, log }) => console.error(`[kafkajs ${label}] ${namespace}: ${log.message}`),
  });
  return kafka.producer(producerConfig());
}
