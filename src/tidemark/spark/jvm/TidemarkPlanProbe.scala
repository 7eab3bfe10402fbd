/*
 * tidemark: what state a stateful query will keep, worked out from Spark's own plan of it (for `tidemark check`).
 *
 * Compiled with the rest of tidemark's JVM helper against the jars of the pyspark wheel (tidemark/spark/jvm), on
 * every supported Spark line: it uses only planner classes that Spark 3.5 (Scala 2.12) and 4.x (Scala 2.13) share.
 * Input and output are JSON strings.
 */
package org.apache.spark.sql.execution.streaming.state

import com.fasterxml.jackson.databind.ObjectMapper
import com.fasterxml.jackson.databind.node.ObjectNode

import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.Attribute
import org.apache.spark.sql.catalyst.expressions.aggregate.Partial
import org.apache.spark.sql.execution.aggregate.BaseAggregateExec
import org.apache.spark.sql.types.{StructField, StructType}

object TidemarkPlanProbe {
  private val mapper = new ObjectMapper()

  /** Entry point for py4j: describe an aggregation's state; JSON out. */
  def run(spark: SparkSession, specJson: String): String = {
    val spec = mapper.readTree(specJson)
    spec.get("action").asText() match {
      case "aggregate_state" => mapper.writeValueAsString(aggregateState(spark, spec.get("view").asText()))
      case other => throw new IllegalArgumentException(s"unknown action $other")
    }
  }

  /**
   * The grouping key and aggregation buffer of the first (partial) aggregation of a batch plan: what a streaming
   * aggregation of the same columns keeps as its state key and value (state format 2).
   */
  private def aggregateState(spark: SparkSession, view: String): ObjectNode = {
    val plan = spark.table(view).queryExecution.sparkPlan
    val partial = plan.collect {
      case a: BaseAggregateExec if a.aggregateExpressions.nonEmpty && a.aggregateExpressions.forall(_.mode == Partial) =>
        a
    }
    val result = mapper.createObjectNode()
    partial.lastOption.foreach { a =>
      def struct(attrs: Seq[Attribute]): String =
        StructType(attrs.map(x => StructField(x.name, x.dataType, x.nullable))).json
      result.put("key", struct(a.groupingExpressions.map(_.toAttribute)))
      result.put("value", struct(a.aggregateExpressions.flatMap(_.aggregateFunction.aggBufferAttributes)))
      result.put("output", struct(a.output))
    }
    result
  }
}
