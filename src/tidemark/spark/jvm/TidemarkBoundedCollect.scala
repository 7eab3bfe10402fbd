/*
 * tidemark: a stream's malformed records carried to the driver in its own observation, up to a size.
 *
 * An aggregate for `Dataset.observe`: it collects strings (one JSON record each) until their total length passes
 * `maxChars`, then drops them all and says so (null), so the driver gets either every record of the batch or none,
 * never a part, and never more than maxChars per batch however many rows are malformed. Spark's own collect_list
 * has no bound. Compiled with the rest of tidemark's JVM helper (tidemark/spark/jvm) on every supported Spark line
 * and put on the session's spark.jars, so executors run it and the driver merges its buffers.
 */
package org.apache.spark.sql.execution.streaming.state

import org.apache.spark.sql.{Column, Encoder, Encoders, functions}
import org.apache.spark.sql.expressions.Aggregator

/** The records so far, their total length, and whether the bound was passed (then no records are kept). */
class TidemarkBoundedBuffer(var items: java.util.ArrayList[String], var chars: Long, var overflow: Boolean)
    extends Serializable {
  def this() = this(new java.util.ArrayList[String](), 0L, false)
}

class TidemarkBoundedCollect(maxChars: Long) extends Aggregator[String, TidemarkBoundedBuffer, String] {
  def zero: TidemarkBoundedBuffer = new TidemarkBoundedBuffer()

  private def spill(b: TidemarkBoundedBuffer): TidemarkBoundedBuffer = {
    b.items.clear()
    b.chars = 0L
    b.overflow = true
    b
  }

  def reduce(b: TidemarkBoundedBuffer, record: String): TidemarkBoundedBuffer = {
    if (record == null || b.overflow) b
    else if (b.chars + record.length > maxChars) spill(b)
    else {
      b.items.add(record)
      b.chars += record.length
      b
    }
  }

  def merge(b1: TidemarkBoundedBuffer, b2: TidemarkBoundedBuffer): TidemarkBoundedBuffer = {
    if (b1.overflow || b2.overflow || b1.chars + b2.chars > maxChars) spill(b1)
    else {
      b1.items.addAll(b2.items)
      b1.chars += b2.chars
      b1
    }
  }

  /** A JSON array of the records, or null when they passed the bound. */
  def finish(b: TidemarkBoundedBuffer): String =
    if (b.overflow) null else b.items.toArray.mkString("[", ",", "]")

  def bufferEncoder: Encoder[TidemarkBoundedBuffer] = Encoders.javaSerialization(classOf[TidemarkBoundedBuffer])

  def outputEncoder: Encoder[String] = Encoders.STRING
}

object TidemarkBoundedCollect {
  /** Entry point for py4j: the aggregate over a string column (null rows are skipped). */
  def column(records: Column, maxChars: Long): Column =
    functions.udaf(new TidemarkBoundedCollect(maxChars), Encoders.STRING).apply(records)
}
