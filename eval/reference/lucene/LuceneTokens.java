// Prints the token stream of Anserini's default English analyzer (the analyzer pyserini's
// get_lucene_analyzer() returns and Anserini indexes with: StandardTokenizer,
// EnglishPossessiveFilter, LowerCaseFilter, StopFilter with Lucene's English stop set,
// PorterStemFilter) for each text of a JSON-lines file.
//
//   java -cp anserini-*-fatjar.jar LuceneTokens.java IN.jsonl OUT.jsonl
//
// IN: one {"text": "..."} per line. OUT: one {"tokens": [...]} per input line, in order.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.anserini.analysis.DefaultEnglishAnalyzer;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.lucene.analysis.Analyzer;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.tokenattributes.CharTermAttribute;

public class LuceneTokens {
  public static void main(String[] args) throws Exception {
    ObjectMapper json = new ObjectMapper();
    Analyzer analyzer = DefaultEnglishAnalyzer.newDefaultInstance();
    try (BufferedReader in = Files.newBufferedReader(Path.of(args[0]), StandardCharsets.UTF_8);
        BufferedWriter out = Files.newBufferedWriter(Path.of(args[1]), StandardCharsets.UTF_8)) {
      String line;
      while ((line = in.readLine()) != null) {
        JsonNode node = json.readTree(line);
        String text = node.get("text").asText();
        List<String> tokens = new ArrayList<>();
        try (TokenStream ts = analyzer.tokenStream("contents", text)) {
          CharTermAttribute term = ts.addAttribute(CharTermAttribute.class);
          ts.reset();
          while (ts.incrementToken()) {
            tokens.add(term.toString());
          }
          ts.end();
        }
        out.write(json.writeValueAsString(Map.of("tokens", tokens)));
        out.write('\n');
      }
    }
  }
}
