/*
 * tidemark: rewrite the state stores of a stopped streaming query for a new number of partitions.
 *
 * Compiled at install time against the jars of the pyspark wheel (tidemark/spark/jvm/__init__.py) and
 * loaded into the running session through py4j. It lives in Spark's state package so that it can use the
 * same classes Spark's own operators use: the state store providers read every row of every column family
 * at one version, Spark's Murmur3 hash (HashPartitioning with seed 42, pmod N) decides each row's new
 * partition, and the providers write the new stores, so file names, checksums, encoders and compression
 * are Spark's own.
 *
 * Input and output are JSON strings, so nothing but JDK, Scala and Spark types ever crosses from this
 * jar's class loader to Spark's (task results, accumulators and shuffle records are tuples and arrays).
 *
 * Compiled on Spark 4.0 and newer only: it needs the column-family state store API that came with
 * transformWithState in 4.0 (tidemark.spark.lines' STATE_REWRITE; CI compiles it on every line that claims it).
 */
package org.apache.spark.sql.execution.streaming.state

import java.nio.ByteBuffer
import java.util.UUID

import scala.jdk.CollectionConverters._

import com.fasterxml.jackson.databind.{JsonNode, ObjectMapper}
import com.fasterxml.jackson.databind.node.{ArrayNode, ObjectNode}
import org.apache.hadoop.fs.Path

import org.apache.spark.{HashPartitioner, TaskContext}
import org.apache.spark.rdd.RDD
import org.apache.spark.sql.SparkSession
import org.apache.spark.sql.catalyst.expressions.{BoundReference, Expression, GetStructField, Literal, Murmur3Hash, Pmod, UnsafeProjection, UnsafeRow}
import org.apache.spark.sql.internal.SQLConf
import org.apache.spark.sql.types.{StructField, StructType}
import org.apache.spark.util.SerializableConfiguration

/** Where the partition key sits inside a state key: the whole key, all but its last n fields, or a nested struct. */
case class TidemarkPartitionKey(kind: String, dropLast: Int, path: Seq[Int]) {

  /** Expressions over the state key row that give the fields Spark hashed when it shuffled the row. */
  def fields(keySchema: StructType): Seq[Expression] = kind match {
    case "all" =>
      keySchema.fields.toSeq.zipWithIndex.map { case (f, i) => BoundReference(i, f.dataType, f.nullable) }
    case "drop_last" =>
      keySchema.fields.toSeq.zipWithIndex.take(keySchema.length - dropLast).map { case (f, i) =>
        BoundReference(i, f.dataType, f.nullable)
      }
    case "path" =>
      var expr: Expression = BoundReference(path.head, keySchema(path.head).dataType, nullable = true)
      var struct = keySchema(path.head).dataType.asInstanceOf[StructType]
      path.tail.foreach { i =>
        expr = GetStructField(expr, i)
        struct = struct(i).dataType.asInstanceOf[StructType]
      }
      val base = expr
      struct.fields.toSeq.indices.map(i => GetStructField(base, i))
    case other => throw new IllegalArgumentException(s"unknown partition key kind $other")
  }
}

/** One column family to move (the whole store for operators without column families). */
case class TidemarkColumnFamily(
    name: String,
    keySchema: StructType,
    valueSchema: StructType,
    encoder: KeyStateEncoderSpec,
    multipleValues: Boolean,
    internal: Boolean,
    partitionKey: TidemarkPartitionKey)

object TidemarkStateRewrite {
  private val mapper = new ObjectMapper()
  private val HashSeed = 42

  /** Entry point for py4j: plan (count only) or write one store; JSON out. */
  def run(spark: SparkSession, specJson: String): String = {
    val spec = mapper.readTree(specJson)
    Option(spec.get("action")).map(_.asText()).getOrElse("rewrite") match {
      case "rewrite" => mapper.writeValueAsString(rewriteStore(spark, spec))
      case other => throw new IllegalArgumentException(s"unknown action $other")
    }
  }

  private def text(node: JsonNode, field: String): String = node.get(field).asText()

  /**
   * An empty HDFS-backed state map. Spark 4.2 added a third argument to its factory (an optional integrity verifier
   * of the rows read back, a class 4.0/4.1 lack), so the factory is found by its arity: None on 4.2+.
   */
  private def newStateMap(keySchema: StructType, numColsPrefixKey: Int): HDFSBackedStateStoreMap = {
    val factory = HDFSBackedStateStoreMap
    val create = factory.getClass.getMethods.filter(_.getName == "create").maxBy(_.getParameterCount)
    val args: Seq[AnyRef] = Seq(keySchema, Int.box(numColsPrefixKey)) ++ Seq.fill(create.getParameterCount - 2)(None)
    create.invoke(factory, args: _*).asInstanceOf[HDFSBackedStateStoreMap]
  }

  /**
   * The map's put(key, value). Spark 4.2 wraps the value (UnsafeRowWrapper, for optional row checksums): a plain
   * StateStoreRow there, the row itself before.
   */
  private def stateMapPut(map: HDFSBackedStateStoreMap): (UnsafeRow, UnsafeRow) => Unit = {
    val put = map.getClass.getMethods.find(m => m.getName == "put" && m.getParameterCount == 2).get
    val wrapped = put.getParameterTypes()(1) != classOf[UnsafeRow]
    val wrap: UnsafeRow => AnyRef =
      if (!wrapped) identity
      else {
        val plain = Class.forName(s"${getClass.getPackage.getName}.StateStoreRow").getConstructor(classOf[UnsafeRow])
        row => plain.newInstance(row).asInstanceOf[AnyRef]
      }
    (key, value) => put.invoke(map, key, wrap(value))
  }

  private def conf(spark: SparkSession, entries: JsonNode): StateStoreConf = {
    val sqlConf: SQLConf = spark.sessionState.conf.clone()
    entries.properties().asScala.foreach(e => sqlConf.setConfString(e.getKey, e.getValue.asText()))
    StateStoreConf(sqlConf)
  }

  private def partitionKey(node: JsonNode): TidemarkPartitionKey = {
    val kind = text(node, "kind")
    val dropLast = Option(node.get("n")).map(_.asInt()).getOrElse(0)
    val path = Option(node.get("path")).map(_.elements().asScala.map(_.asInt()).toSeq).getOrElse(Seq.empty)
    TidemarkPartitionKey(kind, dropLast, path)
  }

  /** transformWithState: the grouping key is the key itself, its "key" struct, or inside a TTL "elementKey". */
  private def transformWithStateKey(keySchema: StructType): TidemarkPartitionKey = {
    def structIndex(schema: StructType, name: String): Option[Int] =
      schema.fields.indexWhere(f => f.name == name && f.dataType.isInstanceOf[StructType]) match {
        case -1 => None
        case i => Some(i)
      }
    val elementKey = structIndex(keySchema, "elementKey")
    val (scope, prefix) = elementKey match {
      case Some(i) => (keySchema(i).dataType.asInstanceOf[StructType], Seq(i))
      case None => (keySchema, Seq.empty[Int])
    }
    structIndex(scope, "key") match {
      case Some(i) => TidemarkPartitionKey("path", 0, prefix :+ i)
      case None if prefix.nonEmpty => TidemarkPartitionKey("path", 0, prefix)
      case None => TidemarkPartitionKey("all", 0, Seq.empty)
    }
  }

  /** Join state formats 3 and 4: each column family's key as evolve/partitioning.py names it (spec "families"). */
  private def joinKey(spec: JsonNode, family: String): TidemarkPartitionKey =
    Option(spec.get("partitionKey").get("families")).flatMap(f => Option(f.get(family))) match {
      case Some(key) => partitionKey(key)
      case None => throw new IllegalArgumentException(s"no partition key for the join column family $family")
    }

  private def columnFamilies(spark: SparkSession, spec: JsonNode, stateRoot: String): Seq[TidemarkColumnFamily] = {
    val operatorId = spec.get("operatorId").asLong()
    val storeName = text(spec, "storeName")
    val schemaFiles = spec.get("schemaFiles").elements().asScala.map(n => new Path(n.asText())).toList
    val storeId = StateStoreId(stateRoot, operatorId, StateStore.PARTITION_ID_TO_CHECK_SCHEMA, storeName)
    val checker = new StateSchemaCompatibilityChecker(
      StateStoreProviderId(storeId, UUID.randomUUID()),
      spark.sessionState.newHadoopConf(),
      schemaFiles,
      None)
    val schemas = checker.readSchemaFile()
    val listFamilies = spec.get("listColumnFamilies").elements().asScala.map(_.asText()).toSet
    val internalFamilies = Option(spec.get("internalColumnFamilies")).map(_.elements().asScala.map(_.asText()).toSet)
      .getOrElse(Set.empty[String])
    val keyKind = text(spec.get("partitionKey"), "kind")
    val transformWithState = keyKind == "transform_with_state"
    val prefixColumns = spec.get("numColsPrefixKey").asInt()
    schemas.map { schema =>
      val encoder = schema.keyStateEncoderSpec.getOrElse {
        if (prefixColumns > 0) PrefixKeyScanStateEncoderSpec(schema.keySchema, prefixColumns)
        else NoPrefixKeyStateEncoderSpec(schema.keySchema)
      }
      val key =
        if (transformWithState) transformWithStateKey(schema.keySchema)
        else if (keyKind == "join") joinKey(spec, schema.colFamilyName)
        else partitionKey(spec.get("partitionKey"))
      TidemarkColumnFamily(
        schema.colFamilyName,
        schema.keySchema,
        schema.valueSchema,
        encoder,
        listFamilies.contains(schema.colFamilyName),
        schema.colFamilyName.startsWith("$") || internalFamilies.contains(schema.colFamilyName),
        key)
    }
  }

  private def openProvider(
      root: String,
      operatorId: Long,
      partition: Int,
      storeName: String,
      families: Seq[TidemarkColumnFamily],
      useColumnFamilies: Boolean,
      storeConf: StateStoreConf,
      hadoopConf: SerializableConfiguration): StateStoreProvider = {
    val first = families.head
    val default = families.find(_.name == StateStore.DEFAULT_COL_FAMILY_NAME)
    val (keySchema, valueSchema, encoder) = default
      .map(d => (d.keySchema, d.valueSchema, d.encoder))
      .getOrElse((first.keySchema, first.valueSchema, NoPrefixKeyStateEncoderSpec(first.keySchema)))
    StateStoreProvider.createAndInit(
      StateStoreProviderId(StateStoreId(root, operatorId, partition, storeName), UUID.randomUUID()),
      keySchema,
      valueSchema,
      encoder,
      useColumnFamilies,
      storeConf,
      hadoopConf.value,
      useMultipleValuesPerKey = false,
      stateSchemaProvider = None)
  }

  private def createFamilies(store: StateStore, families: Seq[TidemarkColumnFamily], use: Boolean): Unit = {
    if (use) {
      families.filter(_.name != StateStore.DEFAULT_COL_FAMILY_NAME).foreach { cf =>
        store.createColFamilyIfAbsent(cf.name, cf.keySchema, cf.valueSchema, cf.encoder, cf.multipleValues, cf.internal)
      }
    }
  }

  /** The Spark expression that places a key on one of n partitions, as HashPartitioning does. */
  private def placement(families: Seq[TidemarkColumnFamily], oldN: Int, newN: Int): Seq[UnsafeProjection] =
    families.map { cf =>
      val hash = Murmur3Hash(cf.partitionKey.fields(cf.keySchema), HashSeed)
      UnsafeProjection.create(Seq(Pmod(hash, Literal(oldN)), Pmod(hash, Literal(newN))))
    }

  private def rewriteStore(spark: SparkSession, spec: JsonNode): ObjectNode = {
    val sc = spark.sparkContext
    val operatorId = spec.get("operatorId").asLong()
    val storeName = text(spec, "storeName")
    val oldRoot = text(spec, "oldStateRoot")
    val newRoot = Option(spec.get("newStateRoot")).filterNot(_.isNull).map(_.asText())
    val version = spec.get("version").asLong()
    val oldN = spec.get("oldPartitions").asInt()
    val newN = spec.get("newPartitions").asInt()
    val readConf = conf(spark, spec.get("readConf"))
    val writeConf = conf(spark, spec.get("writeConf"))
    val useColumnFamilies = spec.get("useColumnFamilies").asBoolean()
    val numColsPrefixKey = spec.get("numColsPrefixKey").asInt()
    // Checkpoint format v2: the unique id of the version's files on each old partition (the commit log's).
    val oldIds: Option[Array[String]] = Option(spec.get("oldUniqueIds")).filterNot(_.isNull)
      .map(_.elements().asScala.map(_.asText()).toArray)
    val families = columnFamilies(spark, spec, oldRoot)
    val hadoopConf = new SerializableConfiguration(spark.sessionState.newHadoopConf())
    val readStats = sc.collectionAccumulator[String]("tidemark-read")

    val records: RDD[(Int, Array[Byte])] =
      sc.parallelize(0 until oldN, oldN).mapPartitions { partitions =>
        val oldPartition = partitions.next()
        val provider = openProvider(oldRoot, operatorId, oldPartition, storeName, families, useColumnFamilies,
          readConf, hadoopConf)
        val store = provider.getStore(version, oldIds.map(_(oldPartition)))
        createFamilies(store, families, useColumnFamilies)
        val projections = placement(families, oldN, newN)
        val rows = new Array[Long](families.length)
        val bytes = new Array[Long](families.length)
        var misplaced = 0L
        var misplacedSample = ""
        val all = families.indices.iterator.flatMap { index =>
          val cf = families(index)
          store.iterator(cf.name).map { pair =>
            val key = pair.key.copy()
            val values =
              if (cf.multipleValues) store.valuesIterator(key, cf.name).map(_.copy().getBytes).toArray
              else Array(pair.value.copy().getBytes)
            val where = projections(index)(key)
            if (where.getInt(0) != oldPartition) {
              misplaced += 1
              if (misplacedSample.isEmpty) misplacedSample = s"${cf.name}: key $key on partition $oldPartition"
            }
            rows(index) += 1
            bytes(index) += key.getSizeInBytes + values.map(_.length.toLong).sum
            (where.getInt(1), pack(index, key.getBytes, values))
          }
        }
        new Iterator[(Int, Array[Byte])] {
          private var closed = false
          override def hasNext: Boolean = {
            val more = all.hasNext
            if (!more && !closed) {
              closed = true
              store.abort()
              provider.close()
              val stats = mapper.createObjectNode()
              stats.put("partition", oldPartition)
              stats.put("misplaced", misplaced)
              stats.put("misplacedSample", misplacedSample)
              val perFamily = stats.putArray("families")
              families.indices.foreach { i =>
                perFamily.addObject().put("name", families(i).name).put("rows", rows(i)).put("bytes", bytes(i))
              }
              readStats.add(mapper.writeValueAsString(stats))
            }
            more
          }
          override def next(): (Int, Array[Byte]) = all.next()
        }
      }

    val written: Array[String] = newRoot match {
      case None =>
        records.mapPartitions { it =>
          val counts = new Array[Long](newN)
          it.foreach { case (target, _) => counts(target) += 1 }
          Iterator(counts.mkString(","))
        }.collect()
      case Some(root) =>
        records.partitionBy(new HashPartitioner(newN)).mapPartitionsWithIndex { (partition, it) =>
          Iterator(writePartition(root, operatorId, partition, storeName, version, families, useColumnFamilies,
            numColsPrefixKey, writeConf, hadoopConf, it.map(r => unpack(r._2))))
        }.collect()
    }

    val result = mapper.createObjectNode()
    result.put("operatorId", operatorId)
    result.put("storeName", storeName)
    val familyNames = result.putArray("families")
    families.foreach(cf => familyNames.add(cf.name))
    val read = result.putArray("read")
    readStats.value.asScala.foreach(s => read.add(mapper.readTree(s)))
    val newCounts = result.putArray("newPartitionRows")
    val newIds = result.putArray("newUniqueIds")
    newRoot match {
      case None =>
        val totals = new Array[Long](newN)
        written.foreach(_.split(",").filter(_.nonEmpty).map(_.toLong).zipWithIndex.foreach { case (n, i) =>
          totals(i) += n
        })
        totals.foreach(n => newCounts.add(n))
      case Some(_) =>
        written.map(_.split(",", -1)).sortBy(_.head.toInt).foreach { r =>
          newCounts.add(r(1).toLong)
          if (r(2).nonEmpty) newIds.add(r(2)) else newIds.addNull()
        }
    }
    result
  }

  /** One row as one byte array: the shuffle serializes a (partition, bytes) pair far cheaper than nested tuples. */
  private def pack(family: Int, key: Array[Byte], values: Array[Array[Byte]]): Array[Byte] = {
    val buffer = ByteBuffer.allocate(12 + key.length + values.map(4 + _.length).sum)
    buffer.putInt(family).putInt(key.length).put(key).putInt(values.length)
    values.foreach(v => buffer.putInt(v.length).put(v))
    buffer.array()
  }

  private def unpack(bytes: Array[Byte]): (Int, Array[Byte], Array[Array[Byte]]) = {
    val buffer = ByteBuffer.wrap(bytes)
    val family = buffer.getInt()
    val key = new Array[Byte](buffer.getInt())
    buffer.get(key)
    val values = Array.fill(buffer.getInt()) {
      val value = new Array[Byte](buffer.getInt())
      buffer.get(value)
      value
    }
    (family, key, values)
  }

  private def writePartition(
      root: String,
      operatorId: Long,
      partition: Int,
      storeName: String,
      version: Long,
      families: Seq[TidemarkColumnFamily],
      useColumnFamilies: Boolean,
      numColsPrefixKey: Int,
      storeConf: StateStoreConf,
      hadoopConf: SerializableConfiguration,
      rows: Iterator[(Int, Array[Byte], Array[Array[Byte]])]): String = {
    val provider = openProvider(root, operatorId, partition, storeName, families, useColumnFamilies, storeConf,
      hadoopConf)
    // RocksDB keeps a committed instance locked until the task ends (a completion listener of its load); listeners
    // run in reverse order, so one added before the load closes the provider after that lock is released.
    TaskContext.get().addTaskCompletionListener[Unit](_ => provider.close())
    // Spark creates a store's folder with its first file; an empty partition at a version above 1 has none.
    val folder = provider.stateStoreId.storeCheckpointLocation()
    folder.getFileSystem(hadoopConf.value).mkdirs(folder)
    var count = 0L
    var uniqueId = ""
    def unsafe(bytes: Array[Byte], fields: Int): UnsafeRow = {
      val row = new UnsafeRow(fields)
      row.pointTo(bytes, bytes.length)
      row
    }
    provider match {
      case hdfs: HDFSBackedStateStoreProvider =>
        val cf = families.head
        val map = newStateMap(cf.keySchema, numColsPrefixKey)
        val put = stateMapPut(map)
        rows.foreach { case (_, key, values) =>
          put(unsafe(key, cf.keySchema.length), unsafe(values.head, cf.valueSchema.length))
          count += 1
        }
        // The provider writes snapshots only from its maintenance thread; this is that same method.
        val write = classOf[HDFSBackedStateStoreProvider].getDeclaredMethod(
          "writeSnapshotFile", classOf[Long], classOf[HDFSBackedStateStoreMap], classOf[String])
        write.setAccessible(true)
        write.invoke(hdfs, Long.box(version), map, "tidemark-repartition")
      case rocks: RocksDBStateStoreProvider =>
        val store = rocks.getStore(0L)
        // An empty store whose next commit is `version`: the snapshot Spark loads when the query restarts.
        // (loadedVersion is protected in Scala, public in the bytecode.)
        classOf[RocksDB].getMethod("loadedVersion_$eq", classOf[Long]).invoke(rocks.rocksDB, Long.box(version - 1))
        createFamilies(store, families, useColumnFamilies)
        rows.foreach { case (index, key, values) =>
          val cf = families(index)
          val keyRow = unsafe(key, cf.keySchema.length)
          if (cf.multipleValues) {
            // A list as Spark 4.0's ListState.put writes one (putList came in 4.1): the first value, then merges.
            store.put(keyRow, unsafe(values.head, cf.valueSchema.length), cf.name)
            values.tail.foreach(v => store.merge(keyRow, unsafe(v, cf.valueSchema.length), cf.name))
          } else {
            store.put(keyRow, unsafe(values.head, cf.valueSchema.length), cf.name)
          }
          count += 1
        }
        val committed = store.commit()
        if (committed != version) {
          throw new IllegalStateException(s"wrote state version $committed instead of $version")
        }
        // Checkpoint format v2: the unique id the files of this version are named by, for the commit log.
        uniqueId = store.getStateStoreCheckpointInfo().stateStoreCkptId.getOrElse("")
      case other =>
        throw new IllegalArgumentException(s"cannot write state with ${other.getClass.getName}")
    }
    s"$partition,$count,$uniqueId"
  }
}
